// The course-build page follows its run live: the server sends "changed" when the
// run's live key moves, and the page swaps in a fresh copy of its run section.
// Without this file (or without EventSource) the page is still complete, just static.
(function () {
  "use strict";

  var pending = false;

  function refresh(section) {
    if (pending) { return; }
    pending = true;
    window.setTimeout(function () {
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) {
          pending = false;
          if (!html) { return; }
          var fresh = new DOMParser().parseFromString(html, "text/html")
            .getElementById("builder-run");
          if (fresh) {
            section.replaceWith(fresh);
            fresh.querySelector(".live").hidden = !fresh.getAttribute("data-stream");
          }
        })
        .catch(function () { pending = false; });
    }, 300);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var section = document.getElementById("builder-run");
    var url = section && section.getAttribute("data-stream");
    if (!url || !window.EventSource) { return; }
    var source = new EventSource(url);
    var marker = section.getAttribute("data-marker");
    section.querySelector(".live").hidden = false;
    source.addEventListener("changed", function (event) {
      var data = JSON.parse(event.data);
      if (data.marker !== marker) {
        marker = data.marker;
        refresh(document.getElementById("builder-run"));
      }
    });
    source.addEventListener("finished", function () {
      source.close();
      refresh(document.getElementById("builder-run"));
    });
  });
})();
