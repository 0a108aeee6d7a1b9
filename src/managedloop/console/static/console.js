// managedloop console: the only script (no inline script runs: the CSP forbids it).
// A session page's timeline follows the session live over server-sent events: each
// "entry" event carries one timeline entry's HTML, rendered and escaped by the server;
// a "facts" event replaces the session's summary (rendered the same way);
// a "status" event updates the status badge, and reloads the page when the session parks
// (its decision forms are rendered by the server).
(function () {
  "use strict";
  var timeline = document.getElementById("timeline");
  if (!timeline || !window.EventSource) { return; }
  var url = timeline.getAttribute("data-stream") + "?since=" + timeline.getAttribute("data-since");
  var source = new EventSource(url);
  var first = null;
  source.addEventListener("entry", function (event) {
    var holder = document.createElement("ol");
    holder.innerHTML = event.data;  // server-rendered, every value escaped there
    var item = holder.firstElementChild;
    if (!item) { return; }
    var seq = item.getAttribute("data-seq");
    if (timeline.querySelector('li[data-seq="' + seq + '"]')) { return; }
    timeline.appendChild(item);
  });
  source.addEventListener("facts", function (event) {
    var facts = document.querySelector("dl.facts");
    if (facts) { facts.outerHTML = event.data; }  // server-rendered, escaped there
  });
  source.addEventListener("status", function (event) {
    var status = JSON.parse(event.data);
    if (first === null) { first = status; }
    var badges = document.querySelectorAll("[data-status]");
    for (var i = 0; i < badges.length; i++) {
      badges[i].textContent = status;
      badges[i].className = "badge st-" + status;
    }
    if (status !== first && status === "parked") {
      source.close();
      window.location.reload();
    }
  });
})();
