/* Live progress of a run: every panel with data-progress-url is refreshed from that JSON
 * (the admin's run progress view) every 2 s until the run is done. Values are formatted as
 * the server formats them (dataflow/admin/progress.py), so nothing jumps on the first poll. */
(function () {
  "use strict";

  var PERIOD_MS = 2000;
  var RETRY_MS = 10000;
  var NONE = "\u2014";

  function number(value) {
    return value === null || value === undefined ? NONE : Math.round(value).toLocaleString("en-US");
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) {
      return NONE;
    }
    seconds = Math.floor(seconds);
    if (seconds < 60) {
      return seconds + " s";
    }
    if (seconds < 3600) {
      return Math.floor(seconds / 60) + " min " + (seconds % 60) + " s";
    }
    return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
  }

  function texts(data) {
    var run = data.run;
    var rate = data.rate || {};
    return {
      status: run.paused ? run.status + " (paused)" : run.status,
      records_read: number(run.records_read),
      splits: number(run.splits_finished) + " / " + number(run.splits_total),
      records_per_s: number(rate.records_per_s),
      lag: number(rate.lag),
      errors_count: number(run.errors_count),
      rows_written: number(run.rows_written),
      duration: duration(run.duration_s),
      message: run.message || NONE
    };
  }

  function render(panel, data) {
    var values = texts(data);
    Array.prototype.forEach.call(panel.querySelectorAll("[data-field]"), function (element) {
      var text = values[element.getAttribute("data-field")];
      if (text !== undefined && element.textContent !== text) {
        element.textContent = text;
      }
    });
    var bar = panel.querySelector("progress");
    if (bar) {
      bar.max = Math.max(data.run.splits_total, 1);
      bar.value = data.run.splits_finished;
      bar.textContent = values.splits;
    }
  }

  function poll(panel) {
    fetch(panel.getAttribute("data-progress-url"), {
      credentials: "same-origin",
      headers: { Accept: "application/json" }
    })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("progress: HTTP " + response.status);
        }
        return response.json();
      })
      .then(function (data) {
        render(panel, data);
        if (data.run.done) {
          panel.setAttribute("data-done", "true");
        } else {
          window.setTimeout(poll, PERIOD_MS, panel);
        }
      })
      .catch(function () {
        // A restarting server or a lost session: try again later, less often.
        window.setTimeout(poll, RETRY_MS, panel);
      });
  }

  function init() {
    var panels = document.querySelectorAll("[data-progress-url]");
    Array.prototype.forEach.call(panels, function (panel) {
      if (panel.getAttribute("data-done") !== "true") {
        window.setTimeout(poll, PERIOD_MS, panel);
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
