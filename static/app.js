// Progressive enhancement only: every page works without this file.
(function () {
  "use strict";

  function relative(iso) {
    var then = Date.parse(iso);
    if (isNaN(then)) { return null; }
    var seconds = (Date.now() - then) / 1000;
    var future = seconds < 0;
    seconds = Math.abs(seconds);
    if (seconds < 5) { return "just now"; }
    var steps = [[60, 1, "s"], [3600, 60, "min"], [86400, 3600, "h"], [86400 * 60, 86400, "d"]];
    var text = Math.floor(seconds / (86400 * 30)) + " mo";
    for (var i = 0; i < steps.length; i++) {
      if (seconds < steps[i][0]) { text = Math.floor(seconds / steps[i][1]) + " " + steps[i][2]; break; }
    }
    return future ? "in " + text : text + " ago";
  }

  function refreshTimes() {
    var nodes = document.querySelectorAll("time[data-rel]");
    for (var i = 0; i < nodes.length; i++) {
      var text = relative(nodes[i].getAttribute("datetime"));
      if (text) { nodes[i].textContent = text; }
    }
  }

  // Long reasons (errors, skip reasons) show their first lines and a "Show all" button;
  // one that fits in those lines is left alone. Without this file they show in full.
  var CLAMP_FROM_CHARS = 200;

  function clampLongText() {
    var nodes = document.querySelectorAll(".error-text, .reason-text");
    for (var i = 0; i < nodes.length; i++) {
      var el = nodes[i];
      if (el.hasAttribute("data-clamp") || el.textContent.length < CLAMP_FROM_CHARS) { continue; }
      el.setAttribute("data-clamp", "");
      var text = document.createElement("span");
      text.className = "clamp";
      while (el.firstChild) { text.appendChild(el.firstChild); }
      el.appendChild(text);
      if (!text.getClientRects().length || text.scrollHeight <= text.clientHeight + 1) { continue; }
      var button = document.createElement("button");
      button.type = "button";
      button.className = "show-all";
      button.textContent = "Show all";
      button.setAttribute("aria-expanded", "false");
      button.addEventListener("click", toggleClamp);
      el.appendChild(button);
    }
  }

  function toggleClamp(event) {
    var button = event.currentTarget;
    var open = button.getAttribute("aria-expanded") !== "true";
    button.previousElementSibling.classList.toggle("open", open);
    button.setAttribute("aria-expanded", open ? "true" : "false");
    button.textContent = open ? "Show less" : "Show all";
  }

  // "/" from anywhere but a text field goes to the search box, as on most consoles.
  function searchShortcut(event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) { return; }
    var target = event.target;
    if (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName)) { return; }
    var box = document.getElementById("nav-q");
    if (!box) { return; }
    event.preventDefault();
    box.focus();
    box.select();
  }

  document.addEventListener("DOMContentLoaded", function () {
    refreshTimes();
    clampLongText();
    window.setInterval(refreshTimes, 15000);
    // Live pages swap parts of themselves in (live.js): their times and reasons are new.
    document.addEventListener("live:updated", function () { refreshTimes(); clampLongText(); });
    document.addEventListener("keydown", searchShortcut);
  });
})();
