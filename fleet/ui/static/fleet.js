// Fleet dashboard: live updates and confirmations.  The pages work without this file.
//
// The page's body names what it watches (data-watch: "any", or "job:NAMESPACE/NAME").
// /ui/events relays the service's server-sent events; when a view arrives that
// concerns the page, the page is fetched again and its #live region replaced
// (keeping the focused element when it still exists).  When the stream fails
// three times in a row the page falls back to polling every POLL_MS.  A page
// whose form is being edited is not refreshed.  The jobs page's search box
// (#job-search) hides the rows of its table whose name, queue and state do not
// hold every word typed, again after each refresh.
"use strict";
(function () {
  const POLL_MS = 5000;
  const MIN_GAP_MS = 1000;
  const body = document.body;
  const watch = body.dataset.watch || "";
  const status = document.getElementById("live-status");
  let lastRefresh = 0;
  // The view version the page was rendered from; events name what changed after it.
  let known = Number(body.dataset.view || "0");
  let pending = null;
  let failures = 0;
  let poller = null;

  function say(text) { if (status) status.textContent = text; }

  function editing() {
    const active = document.activeElement;
    if (active && active.form && active.form.hasAttribute("data-no-refresh")) return true;
    return Array.from(document.querySelectorAll("form[data-no-refresh] input")).some(
      (input) => input.value !== input.defaultValue);
  }

  async function refresh() {
    pending = null;
    if (editing()) { say("updates paused while you edit"); return; }
    lastRefresh = Date.now();
    let response;
    try {
      response = await fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } });
    } catch (e) { say("update failed; retrying"); return; }
    if (!response.ok) { say("update failed (" + response.status + ")"); return; }
    const html = await response.text();
    if (editing()) { say("updates paused while you edit"); return; }
    const next = new DOMParser().parseFromString(html, "text/html").getElementById("live");
    const live = document.getElementById("live");
    if (!next || !live) return;
    const focusedId = document.activeElement && document.activeElement.id;
    const searching = document.getElementById("job-search");
    const term = searching ? searching.value : "";
    live.replaceChildren(...Array.from(next.childNodes).map((n) => document.importNode(n, true)));
    const again = document.getElementById("job-search");
    if (again) again.value = term;
    wire(live);
    if (focusedId) { const found = document.getElementById(focusedId); if (found) found.focus(); }
    say("updated " + new Date().toLocaleTimeString());
  }

  function schedule() {
    if (pending) return;
    const wait = Math.max(0, MIN_GAP_MS - (Date.now() - lastRefresh));
    pending = setTimeout(refresh, wait);
  }

  function concerns(change) {
    if (!change.complete || watch === "any") return true;
    if (watch.startsWith("job:")) return change.jobs.includes(watch.slice(4));
    return false;
  }

  function poll() {
    if (poller) return;
    say("updates: polling every " + POLL_MS / 1000 + " s");
    poller = setInterval(schedule, POLL_MS);
  }

  function listen() {
    if (!watch) return;
    if (!("EventSource" in window)) { poll(); return; }
    const source = new EventSource("/ui/events?after=" + known);
    source.addEventListener("open", () => { failures = 0; say("updates: live"); });
    source.addEventListener("view", (event) => {
      let change;
      try { change = JSON.parse(event.data); } catch (e) { return; }
      if (change.version <= known && change.complete) return;
      known = change.version;
      body.dataset.view = String(change.version);
      if (concerns(change)) schedule();
    });
    source.addEventListener("error", () => {
      failures += 1;
      if (failures >= 3) { source.close(); poll(); }
      else { say("updates: reconnecting"); }
    });
  }

  function search() {
    const box = document.getElementById("job-search");
    const table = document.getElementById("jobs");
    if (!box || !table) return;
    const words = box.value.toLowerCase().split(/\s+/).filter((w) => w);
    let shown = 0;
    const rows = Array.from(table.tBodies[0] ? table.tBodies[0].rows : []);
    rows.forEach((row) => {
      const text = [row.dataset.job || "", row.cells[1] ? row.cells[1].textContent : "",
        row.cells[2] ? row.cells[2].textContent : ""].join(" ").toLowerCase();
      const match = words.every((w) => text.includes(w));
      row.hidden = !match;
      if (match) shown += 1;
    });
    const count = document.getElementById("job-search-count");
    if (count) count.textContent = words.length ? shown + " of " + rows.length + " shown" : "";
  }

  function wire(root) {
    const box = root.querySelector ? root.querySelector("#job-search") : null;
    if (box && !box.dataset.wired) {
      box.dataset.wired = "1";
      box.addEventListener("input", search);
    }
    search();
    root.querySelectorAll("form[data-confirm]").forEach((form) => {
      if (form.dataset.wired) return;
      form.dataset.wired = "1";
      form.addEventListener("submit", (event) => {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
  }

  wire(document);
  listen();
})();
