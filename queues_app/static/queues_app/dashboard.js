/* Self-refresh of the cluster dashboard: every few seconds fetch admin/dashboard.json, swap the
   rendered sections in place and update the node map's cells by id (a changed node list brings
   the map's HTML once).  Pauses while the tab is hidden or on request; backs off on errors.
   Plain DOM, no libraries. */
(function () {
  "use strict";
  var root = document.getElementById("dashboard");
  if (!root || !window.fetch) { return; }
  var url = root.getAttribute("data-url");
  var period = Math.max(2, parseInt(root.getAttribute("data-refresh"), 10) || 5) * 1000;
  var updated = document.getElementById("dash-updated");
  var mode = document.getElementById("dash-mode");
  var toggle = document.getElementById("dash-toggle");
  var refreshBox = updated ? updated.parentNode : null;
  var paused = false, timer = null, failures = 0, inFlight = false;

  function cells() {
    var map = {};
    var list = document.querySelectorAll("#node-map [data-node]");
    for (var i = 0; i < list.length; i++) { map[list[i].getAttribute("data-node")] = list[i]; }
    return map;
  }

  function applyNodes(states, html) {
    var map = cells(), missing = states.length !== Object.keys(map).length;
    for (var i = 0; i < states.length && !missing; i++) {
      var el = map[String(states[i][0])];
      if (!el) { missing = true; break; }
      var cls = "node " + states[i][1];
      if (el.className !== cls) { el.className = cls; }
      if (el.title !== states[i][2]) { el.title = states[i][2]; }
    }
    if (html) { document.getElementById("node-map").innerHTML = html; return false; }
    return missing;  // the node list changed: ask for the map's HTML next time
  }

  var wantNodeHtml = false;

  function stamp(iso) {
    var t = new Date(iso);
    if (updated) {
      updated.textContent = "updated " + t.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit", second: "2-digit"});
      updated.setAttribute("data-generated", iso);
    }
  }

  function refresh() {
    if (paused || document.hidden || inFlight) { schedule(); return; }
    inFlight = true;
    fetch(url + (wantNodeHtml ? "?nodes=html" : ""), {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) {
        if (r.status === 401 || r.status === 403 || r.redirected) { throw new Error("signed out"); }
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(function (data) {
        var sections = data.sections || {};
        Object.keys(sections).forEach(function (name) {
          var box = root.querySelector('[data-section="' + name + '"]');
          if (box) { box.innerHTML = sections[name]; }
        });
        wantNodeHtml = applyNodes(data.nodes || [], data.nodes_html);
        stamp(data.generated_at);
        failures = 0;
        if (refreshBox) { refreshBox.classList.remove("stale"); }
        if (mode) { mode.textContent = "refreshes every " + period / 1000 + " s"; }
        root.setAttribute("data-refreshed", String((parseInt(root.getAttribute("data-refreshed"), 10) || 0) + 1));
      })
      .catch(function (err) {
        failures += 1;
        if (refreshBox) { refreshBox.classList.add("stale"); }
        if (mode) { mode.textContent = "refresh failed (" + err.message + "), retrying"; }
      })
      .then(function () { inFlight = false; schedule(); });
  }

  function schedule() {
    clearTimeout(timer);
    if (paused) { return; }
    timer = setTimeout(refresh, period * Math.min(8, Math.pow(2, failures)));
  }

  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.textContent = paused ? "Resume" : "Pause";
      toggle.setAttribute("aria-pressed", paused ? "true" : "false");
      if (mode) { mode.textContent = paused ? "paused" : "refreshes every " + period / 1000 + " s"; }
      if (!paused) { refresh(); }
    });
  }
  document.addEventListener("visibilitychange", function () { if (!document.hidden && !paused) { refresh(); } });
  schedule();
}());
