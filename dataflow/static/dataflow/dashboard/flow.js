/* A flow's page: throughput and lag charts (uPlot) and the runs timeline, drawn from the
 * data embedded in the page (#flow-data) and kept up to date by live.js. */
(function () {
  "use strict";

  var MAX_POINTS = 720; // as many as the server keeps per series (selectors.runs.SERIES_MAX)
  var initial = JSON.parse(document.getElementById("flow-data").textContent);
  var live = window.dashboardLive;

  var fmt = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
  var compact = new Intl.NumberFormat("en-US", { notation: "compact", maximumFractionDigits: 1 });

  // The samples of the run being charted: their times (s), records/s and lag, and when the
  // run started (s) while the series holds its first sample.
  var state = { runId: null, lastAt: null, runStart: null, xs: [], rps: [], lag: [] };

  function toSeconds(iso) { return Date.parse(iso) / 1000; }

  function takeSeries(data) {
    var runId = data.run ? data.run.id : null;
    if (data.series_reset || runId !== state.runId) {
      // The server sends at most MAX_POINTS samples: fewer is the whole series, from the first.
      var whole = (data.series || []).length < MAX_POINTS && data.run;
      state = {
        runId: runId,
        lastAt: null,
        runStart: whole ? toSeconds(data.run.started_at) : null,
        xs: [],
        rps: [],
        lag: [],
      };
    }
    (data.series || []).forEach(function (s) {
      var x = toSeconds(s.at);
      // The JSON keeps milliseconds: the sample at "since" may come again.
      if (state.xs.length && x <= state.xs[state.xs.length - 1]) return;
      state.xs.push(x);
      state.rps.push(s.records_per_s);
      state.lag.push(s.lag);
      state.lastAt = s.at;
    });
    if (state.xs.length > MAX_POINTS) {
      var cut = state.xs.length - MAX_POINTS;
      state.xs.splice(0, cut);
      state.rps.splice(0, cut);
      state.lag.splice(0, cut);
      state.runStart = null;
    }
  }

  // A sample's records/s is the rate over the time since the sample before it (the run's
  // first, since the run started): draw it as a step held over that time, not as a line
  // from the sample before, which would draw a ramp nobody measured (from 0 up to the
  // first rate, for a run shorter than a sample). [xs, ys] for uPlot.
  var EPSILON_S = 0.001;
  function rateSteps() {
    var xs = [], ys = [];
    state.xs.forEach(function (x, i) {
      var from = i > 0 ? state.xs[i - 1] + EPSILON_S : state.runStart;
      if (from != null && from < x) {
        xs.push(from);
        ys.push(state.rps[i]);
      }
      xs.push(x);
      ys.push(state.rps[i]);
    });
    return [xs, ys];
  }

  function chartOptions(el, label, color) {
    return {
      width: Math.max(el.clientWidth, 200),
      height: 220,
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: { time: true },
        y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.12 : 1]; } },
      },
      series: [
        {},
        {
          label: label,
          stroke: color,
          width: 2,
          fill: color + "1f",
          points: { show: false },
          spanGaps: false,
          value: function (u, v) { return v == null ? "—" : fmt.format(v); },
        },
      ],
      axes: [
        { stroke: "#64748b", grid: { stroke: "#eef2f7" }, ticks: { stroke: "#e2e8f0" } },
        {
          stroke: "#64748b",
          size: 56,
          grid: { stroke: "#eef2f7" },
          ticks: { stroke: "#e2e8f0" },
          values: function (u, vals) { return vals.map(function (v) { return compact.format(v); }); },
        },
      ],
    };
  }

  function makeChart(id, label, color) {
    var el = document.getElementById(id);
    var chart = new uPlot(chartOptions(el, label, color), [[], []], el);
    if (window.ResizeObserver) {
      new ResizeObserver(function () {
        var width = Math.max(el.clientWidth, 200);
        if (width !== chart.width) chart.setSize({ width: width, height: 220 });
      }).observe(el);
    }
    return { el: el, chart: chart, noValues: el.getAttribute("data-empty") };
  }

  var throughput = makeChart("chart-throughput", "records/s", "#2563eb");
  var lag = makeChart("chart-lag", "lag", "#d97706");
  // What each chart draws, for a person in the console and for the browser tests.
  window.dashboardCharts = { throughput: throughput.chart, lag: lag.chart };

  function draw(target, data) {
    // One known value is a point, not a line (and uPlot spreads a lone point's axis over years).
    var known = data[1].filter(function (v) { return v != null; }).length > 1;
    target.chart.setData(data);
    target.el.classList.toggle("is-empty", !known);
    // No sample at all says so on both charts; samples without a value, why.
    target.el.setAttribute("data-empty", state.xs.length ? target.noValues : throughput.noValues);
    target.el.setAttribute("data-points", String(known ? state.xs.length : 0));
  }

  function drawTimeline(runs) {
    var box = document.getElementById("runs-timeline");
    box.textContent = "";
    if (!runs || !runs.length) return;
    var now = Date.now();
    var spans = runs.map(function (r) {
      var start = Date.parse(r.started_at);
      var end = r.finished_at ? Date.parse(r.finished_at) : now;
      return { run: r, start: start, end: Math.max(end, start) };
    });
    var t0 = Math.min.apply(null, spans.map(function (s) { return s.start; }));
    var t1 = Math.max(now, Math.max.apply(null, spans.map(function (s) { return s.end; })));
    var width = Math.max(t1 - t0, 1000);
    var lane = document.createElement("div");
    lane.className = "timeline-lane";
    spans.forEach(function (s) {
      var seg = document.createElement("div");
      var status = s.run.paused ? "paused" : s.run.status;
      seg.className = "timeline-seg seg-" + status;
      seg.style.left = ((s.start - t0) / width) * 100 + "%";
      var share = ((s.end - s.start) / width) * 100;
      seg.style.width = Math.max(share, 0.4) + "%";
      seg.title = "Run #" + s.run.id + ": " + status + ", " + duration((s.end - s.start) / 1000) +
        ", " + fmt.format(s.run.records_read) + " records";
      if (share >= 5) seg.textContent = "#" + s.run.id; // a narrower one has its title only
      lane.appendChild(seg);
    });
    var axis = document.createElement("div");
    axis.className = "timeline-axis";
    [new Date(t0).toLocaleString(), "now"].forEach(function (text) {
      var label = document.createElement("span");
      label.textContent = text;
      axis.appendChild(label);
    });
    box.appendChild(lane);
    box.appendChild(axis);
  }

  function duration(seconds) {
    if (seconds < 120) return fmt.format(seconds) + " s";
    if (seconds < 7200) return fmt.format(seconds / 60) + " min";
    return fmt.format(seconds / 3600) + " h";
  }

  // Set here, not in a style attribute: the Content-Security-Policy allows no inline style.
  function sizeBars() {
    document.querySelectorAll("[data-progress]").forEach(function (bar) {
      bar.style.width = Number(bar.getAttribute("data-progress")) + "%";
    });
  }

  function update(data) {
    sizeBars();
    takeSeries(data);
    draw(throughput, rateSteps());
    draw(lag, [state.xs.slice(), state.lag.slice()]);
    drawTimeline(data.runs);
  }

  update(initial);
  if (live) {
    live.params = function () {
      var params = {};
      if (state.runId != null) params.run = state.runId;
      if (state.lastAt) params.since = state.lastAt;
      return params;
    };
    live.onData(update);
  }
})();
