/* Keeps a dashboard page fresh: polls the page's JSON view (main[data-live-url]) and puts
 * the parts it sends (html[name]) into the elements marked data-part="name"; other scripts
 * get the data through window.dashboardLive.onData(fn) and may add query parameters
 * through window.dashboardLive.params = () => ({...}). */
(function () {
  "use strict";

  var main = document.querySelector("main[data-live-url]");
  if (!main) return;
  var url = main.getAttribute("data-live-url");
  var every = Number(main.getAttribute("data-poll-ms")) || 3000;
  var status = document.querySelector("[data-live-status]");
  var listeners = [];
  var timer = null;
  var inFlight = false;
  var failures = 0;
  var stopped = false;

  var live = {
    params: null,
    onData: function (fn) { listeners.push(fn); },
  };
  window.dashboardLive = live;

  function setStatus(text, down) {
    if (!status) return;
    status.textContent = text;
    status.classList.toggle("is-down", !!down);
  }

  function apply(data) {
    var parts = data.html || {};
    Object.keys(parts).forEach(function (name) {
      document.querySelectorAll('[data-part="' + name + '"]').forEach(function (el) {
        el.innerHTML = parts[name];
      });
    });
    listeners.forEach(function (fn) { fn(data); });
  }

  function poll() {
    timer = null;
    if (inFlight || stopped) return;
    inFlight = true;
    var query = new URLSearchParams(live.params ? live.params() : {}).toString();
    fetch(url + (query ? "?" + query : ""), {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    })
      .then(function (resp) {
        var type = resp.headers.get("content-type") || "";
        if (resp.redirected || (resp.ok && type.indexOf("application/json") === -1)) {
          // The session ended: the login page is where the user goes now.
          window.location.reload();
          stopped = true;
          return null;
        }
        if (resp.status === 404) {
          stopped = true;
          setStatus("this flow is gone", true);
          return null;
        }
        if (!resp.ok) throw new Error("HTTP " + resp.status);
        return resp.json();
      })
      .then(function (data) {
        if (!data) return;
        apply(data);
        failures = 0;
        setStatus("updated " + new Date().toLocaleTimeString(), false);
      })
      .catch(function (err) {
        failures += 1;
        setStatus("no answer (" + err.message + "), retrying", true);
      })
      .then(function () {
        inFlight = false;
        schedule();
      });
  }

  function schedule() {
    if (stopped || document.hidden || timer) return;
    // Back off while the server does not answer: 2x per failure, at most 30 s.
    var wait = failures ? Math.min(every * Math.pow(2, failures), 30000) : every;
    timer = setTimeout(poll, wait);
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      if (timer) clearTimeout(timer);
      timer = null;
    } else {
      poll();
    }
  });

  setStatus("live, every " + Math.round(every / 1000) + " s", false);
  schedule();
})();
