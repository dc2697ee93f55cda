// Live pages (a run, the run list, a course build): the server sends "changed" when what
// the page shows moved, and the page fetches a fresh copy of itself and swaps its
// [data-live] regions in place. No reload: keyboard focus stays where it was (on the
// same control in the fresh copy), the scroll position stays, and an operator can pause
// the updates. The bar says the truth about the stream in its live region: "Live" (with
// its marker) only while one is open; "Reconnecting…" while the server is away or busy;
// "Live updates stopped — sign in again" once the session has ended.
// Without this file (or without EventSource) the page is complete, only static.
(function () {
  "use strict";

  var FIRST_RETRY_MS = 2000, LONGEST_RETRY_MS = 60000;
  var bar, stateText, toggle, signIn, source = null, paused = false, over = false;
  var fetching = false, again = false, marker = null, retryIn = FIRST_RETRY_MS, retryTimer = null;

  // What identifies a focusable element across two copies of the page.
  function keyOf(el) {
    if (!el || el === document.body) { return null; }
    if (el.id) { return "#" + CSS.escape(el.id); }
    var name = el.getAttribute("name");
    var form = el.form;
    if (name && form && form.getAttribute("action")) {
      return "form[action=\"" + CSS.escape(form.getAttribute("action")) + "\"] [name=\"" + CSS.escape(name) + "\"]";
    }
    if (name) { return "[name=\"" + CSS.escape(name) + "\"]"; }
    if (el.getAttribute("href")) { return "[href=\"" + CSS.escape(el.getAttribute("href")) + "\"]"; }
    return null;
  }

  // One word for the marker (CSS draws it for "live" only), one sentence for the region.
  function show(state, text) {
    bar.setAttribute("data-state", state);
    if (stateText.textContent !== text) { stateText.textContent = text; }
  }

  function swap(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    var active = document.activeElement;
    var regions = document.querySelectorAll("[data-live]");
    var refocus = null;
    for (var i = 0; i < regions.length; i++) {
      var name = regions[i].getAttribute("data-live");
      var next = fresh.querySelector("[data-live=\"" + name + "\"]");
      if (!next) { continue; }
      if (active && regions[i].contains(active)) { refocus = keyOf(active); }
      regions[i].replaceWith(document.importNode(next, true));
    }
    // The badges in the navigation count the same things.
    var nav = document.querySelector(".nav"), freshNav = fresh.querySelector(".nav");
    if (nav && freshNav && !(active && nav.contains(active))) { nav.replaceWith(document.importNode(freshNav, true)); }
    // The run list follows the running runs it shows: a new one joins the stream.
    var freshBar = fresh.querySelector(".live-bar[data-stream]");
    if (freshBar && !over) {
      var url = freshBar.getAttribute("data-stream");
      if (url !== bar.getAttribute("data-stream")) {
        bar.setAttribute("data-stream", url);
        if (!paused) { close(); marker = null; open(); }
      }
    }
    if (refocus) {
      var target = document.querySelector(refocus);
      if (target) { target.focus({ preventScroll: true }); }
    }
    document.dispatchEvent(new CustomEvent("live:updated"));
  }

  function refresh() {
    if (paused) { return; }
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Live": "1" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) { if (html && !paused) { swap(html); } })
      .catch(function () { /* the next change tries again */ })
      .then(function () {
        // At most one fetch in flight, and a short rest between two.
        window.setTimeout(function () {
          fetching = false;
          if (again) { again = false; refresh(); }
        }, 1000);
      });
  }

  function finishedText(data) {
    var status = (data.status || "").replace(/_/g, " ");
    var at = data.finished_at ? new Date(data.finished_at) : null;
    var when = at && !isNaN(at) ? " at " + at.toISOString().slice(11, 19) + " UTC" : "";
    return (bar.getAttribute("data-finished-label") || "Run finished") + ": " + status + when + ".";
  }

  // The stream is over for good: the run finished, or the session ended.
  function end(state, text) {
    over = true;
    close();
    toggle.hidden = true;
    show(state, text);
  }

  function sessionEnded() {
    signIn.href = "/login?next=" + encodeURIComponent(window.location.pathname + window.location.search);
    signIn.hidden = false;
    end("stopped", "Live updates stopped — sign in again");
  }

  // Try again later, waiting longer each time until a stream opens.
  function reconnectLater() {
    show("reconnecting", "Reconnecting…");
    window.clearTimeout(retryTimer);
    retryTimer = window.setTimeout(function () { if (!paused && !over) { open(); } }, retryIn);
    retryIn = Math.min(retryIn * 2, LONGEST_RETRY_MS);
  }

  // The server refused the stream (a cap, an outage, a sign-in page instead): which one?
  function diagnose() {
    show("reconnecting", "Reconnecting…");
    fetch(window.location.href, { credentials: "same-origin", redirect: "manual", headers: { "X-Live": "1" } })
      .then(function (response) {
        if (response.type === "opaqueredirect" || response.status === 401 || response.status === 403) {
          sessionEnded();
        } else {
          reconnectLater();
        }
      })
      .catch(reconnectLater);
  }

  function open() {
    window.clearTimeout(retryTimer);
    var url = bar.getAttribute("data-stream");
    var current = new EventSource(url);
    source = current;
    current.addEventListener("open", function () {
      retryIn = FIRST_RETRY_MS;
      show("live", "Live");
    });
    current.addEventListener("changed", function (event) {
      var data = JSON.parse(event.data);
      if (marker !== null && data.marker !== marker) { refresh(); }
      marker = data.marker;
    });
    current.addEventListener("finished", function (event) {
      var data = JSON.parse(event.data);
      bar.setAttribute("data-finished", "1");
      end("finished", finishedText(data));
      refresh();
    });
    // The server ends each stream after a while (and when its process stops): a new one
    // at once, the marker kept, so only a real change refreshes the page.
    current.addEventListener("rest", function () { close(); open(); });
    current.addEventListener("ended", sessionEnded);
    current.addEventListener("unavailable", function () { close(); reconnectLater(); });
    current.addEventListener("error", function () {
      if (source !== current) { return; }  // closed on purpose
      if (current.readyState === EventSource.CONNECTING) {
        // The connection broke: the browser tries again by itself.
        show("reconnecting", "Reconnecting…");
        return;
      }
      close();
      diagnose();
    });
  }

  function close() {
    if (source) { var closing = source; source = null; closing.close(); }
  }

  function setPaused(value) {
    paused = value;
    toggle.setAttribute("aria-pressed", value ? "true" : "false");
    toggle.textContent = value ? "Resume live updates" : "Pause live updates";
    if (value) {
      close();
      window.clearTimeout(retryTimer);
      show("paused", "Live updates paused");
    } else {
      retryIn = FIRST_RETRY_MS;
      open();
      refresh();
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    bar = document.querySelector(".live-bar[data-stream]");
    if (!bar || !window.EventSource || !window.fetch) { return; }
    stateText = bar.querySelector(".live-state");
    toggle = bar.querySelector("[data-live-toggle]");
    signIn = bar.querySelector(".live-sign-in");
    marker = bar.getAttribute("data-marker");
    bar.hidden = false;
    show("connecting", "Connecting…");
    toggle.addEventListener("click", function () { setPaused(!paused); });
    open();
  });
})();
