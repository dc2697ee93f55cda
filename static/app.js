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

  document.addEventListener("DOMContentLoaded", function () {
    refreshTimes();
    window.setInterval(refreshTimes, 15000);
    // Live pages swap parts of themselves in (live.js): their times are fresh ones.
    document.addEventListener("live:updated", refreshTimes);
  });
})();
