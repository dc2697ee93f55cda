// Live run pages: the server sends "changed" when what the page shows moved, and the
// page fetches a fresh copy of itself and swaps its [data-live] regions in place.
// No reload: keyboard focus stays where it was (on the same control in the fresh
// copy), the scroll position stays, and an operator can pause the updates.
// Without this file (or without EventSource) the page is complete, only static.
(function () {
  "use strict";

  var bar, stateText, toggle, source = null, paused = false, fetching = false, again = false;
  var marker = null;

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

  function say(text) { if (stateText) { stateText.textContent = text; } }

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
    if (freshBar && bar && !bar.getAttribute("data-finished")) {
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
    return "Run finished: " + status + when + ".";
  }

  function open() {
    var url = bar.getAttribute("data-stream");
    source = new EventSource(url);
    source.addEventListener("changed", function (event) {
      var data = JSON.parse(event.data);
      if (marker !== null && data.marker !== marker) { refresh(); }
      marker = data.marker;
    });
    source.addEventListener("finished", function (event) {
      var data = JSON.parse(event.data);
      close();
      refresh();
      bar.setAttribute("data-finished", "1");
      toggle.hidden = true;
      say(finishedText(data));
    });
  }

  function close() { if (source) { source.close(); source = null; } }

  function setPaused(value) {
    paused = value;
    toggle.setAttribute("aria-pressed", value ? "true" : "false");
    toggle.textContent = value ? "Resume live updates" : "Pause live updates";
    if (value) {
      close();
      say("Live updates paused");
    } else {
      say("Live");
      marker = null;
      open();
      refresh();
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    bar = document.querySelector(".live-bar[data-stream]");
    if (!bar || !window.EventSource || !window.fetch) { return; }
    stateText = bar.querySelector(".live-state");
    toggle = bar.querySelector("[data-live-toggle]");
    bar.hidden = false;
    toggle.addEventListener("click", function () { setPaused(!paused); });
    open();
  });
})();
