// berth dashboard: live updates over Server-Sent Events, actions through fetch, the log tail. No build step.
"use strict";

const $ = (sel) => document.querySelector(sel);

// The dashboard's token, kept in this origin's localStorage and sent only by this script, as a header: never a
// cookie, which the browser would send to every server on this host, whatever its port. The first page is opened
// with the token in its address (`/?token=…`): it is kept, and taken out of the address.
const TOKEN_KEY = "berth-token";
function takeToken() {
  const u = new URL(location.href);
  const t = u.searchParams.get("token");
  if (t) {
    localStorage.setItem(TOKEN_KEY, t);
    u.searchParams.delete("token");
    history.replaceState(history.state, "", u.pathname + u.search + u.hash);
  }
  return localStorage.getItem(TOKEN_KEY) || "";
}
const token = takeToken();

// A request of this page: the token in its header.
function authed(init) {
  const o = Object.assign({ credentials: "omit" }, init || {});
  o.headers = Object.assign({}, o.headers, { authorization: "Bearer " + token });
  return o;
}

// A page opened without the token in its address answers with a shell (no data): fetched again with the token, and
// shown. Without a token (or with a stale one) the shell's own line says how to get one.
async function unshell() {
  const msg = $("#shell-message");
  const said = msg ? msg.textContent : "";
  if (!token) return false;
  if (msg) msg.textContent = "";
  const r = await fetch(location.href, authed());
  if (r.status === 401) {
    localStorage.removeItem(TOKEN_KEY);
    if (msg) msg.textContent = said;
    return false;
  }
  const text = await r.text();
  if (!(r.headers.get("content-type") || "").includes("text/html")) {
    const pre = document.createElement("pre");
    pre.textContent = text;
    document.body.replaceChildren(pre);
    return false;
  }
  const doc = new DOMParser().parseFromString(text, "text/html");
  document.title = doc.title;
  document.body.replaceWith(document.importNode(doc.body, true));
  return true;
}

function flash(text, ok) {
  const f = $("#flash");
  if (!f) return;
  f.textContent = text;
  f.className = ok ? "ok" : "err";
}

// Writes carry the custom header the server requires (a cross-site page cannot send it); whether it went through.
async function post(url, body) {
  try {
    const r = await fetch(url, authed({
      method: "POST",
      headers: { "content-type": "application/json", "x-berth-csrf": "1" },
      body: JSON.stringify(body || {}),
    }));
    const v = await r.json().catch(() => ({ error: "HTTP " + r.status }));
    flash(v.message || v.error, r.ok);
    refresh();
    return r.ok;
  } catch (e) {
    flash("the dashboard did not answer: " + e, false);
    refresh();
    return false;
  }
}

// The live parts of a page are swapped in again on each change; one round of fetches at a time, one more if changes
// came meanwhile. What the operator set on the page (the filter, the selection) is applied again to what came in.
let busy = false, again = false;
async function refresh() {
  const live = document.querySelectorAll("[data-fragment], [data-refresh]");
  if (!live.length) return;
  if (busy) { again = true; return; }
  busy = true;
  try {
    for (const el of live) {
      const r = await fetch(el.dataset.fragment || el.dataset.refresh, authed());
      if (r.ok) { el.innerHTML = await r.text(); settle(el); }
    }
    chart(false);
  } finally {
    busy = false;
    if (again) { again = false; refresh(); }
  }
}

// The task a card's control acts on: its own `data-task` (the task page's buttons) or its card's.
const taskOf = (el) => el.closest("[data-task]").dataset.task;

// After a region is (re)drawn: times in the browser's own time zone, the filter and the selection applied again.
function settle(root) {
  localTimes(root);
  applyFilter();
  root.querySelectorAll("input.pick").forEach((cb) => { cb.checked = picked.has(taskOf(cb)); });
  countPicked();
}

// Times come as RFC 3339 (UTC); each is shown in local time, the exact value kept as its tooltip.
function localTimes(root) {
  root.querySelectorAll("time[datetime]").forEach((el) => {
    const d = new Date(el.getAttribute("datetime"));
    if (isNaN(d)) return;
    el.title = el.getAttribute("datetime");
    el.textContent = d.toLocaleString();
  });
}

// The throughput chart, fetched at start and at most every 5 s after a change.
let chartAt = 0;
async function chart(force) {
  const box = $("[data-chart]");
  if (!box || (!force && Date.now() - chartAt < 5000)) return;
  chartAt = Date.now();
  try {
    const r = await fetch(box.dataset.chart, authed());
    if (r.ok) { box.innerHTML = await r.text(); localTimes(box); }
  } catch (e) { /* the next change tries again */ }
}

// The filter: a card is shown when every word typed is in its title, id, assignee or status.
function applyFilter() {
  const f = $("#filter");
  const words = f ? f.value.toLowerCase().split(/\s+/).filter(Boolean) : [];
  document.querySelectorAll(".card[data-task]").forEach((card) => {
    const title = card.querySelector(".title");
    const hay = [card.dataset.task, card.dataset.assignee, card.dataset.status, title ? title.textContent : ""]
      .join(" ").toLowerCase();
    card.hidden = !words.every((w) => hay.includes(w));
  });
  document.querySelectorAll("section.col").forEach((col) => {
    const n = col.querySelector("h2 .n");
    if (!n) return;
    const all = col.querySelectorAll(".card[data-task]").length;
    const shown = col.querySelectorAll(".card[data-task]:not([hidden])").length;
    n.textContent = words.length ? shown + "/" + all : String(all);
  });
}

// The cards selected for a bulk action, by id (kept across redraws).
const picked = new Set();
function countPicked() {
  const n = $("#selected-n");
  if (n) n.textContent = picked.size + " selected";
}

// What the operator is asked before an action that stops, ends or drops something; dismissed, nothing is sent.
const CONFIRM = {
  archive: (id) => `Archive ${id}? Its worker is stopped; its sandbox, workspace and log are removed.`,
  remove: (id) => `Remove ${id} from the board? Its worker, sandbox, workspace and log go with it.`,
  reclaim: (id) => `Take ${id} back from its worker (stopped) to ready?`,
  complete: (id) => `Mark ${id} done? A running worker is stopped.`,
};

// A task's action from its button: asked first where it stops or ends something (block asks why).
function act(action, id) {
  const url = `/api/tasks/${encodeURIComponent(id)}/${action}`;
  if (action === "block") {
    const reason = prompt(`Block ${id}: why? (its worker, if any, is stopped)`, "");
    if (reason === null) return;
    post(url, { reason });
    return;
  }
  if (action === "request-changes") {
    // The note is on the task's record and its next run is given it (BERTH_REVIEW_NOTE).
    const note = prompt(`Request changes on ${id}: what should change?`, "");
    if (note === null) return;
    post(url, { note });
    return;
  }
  if (CONFIRM[action] && !confirm(CONFIRM[action](id))) return;
  // A task removed from its own page has no page left: back to its board.
  post(url, {}).then((ok) => { if (ok && action === "remove" && $("#detail")) location.href = "/"; });
}

// A bulk action over the selected cards that are shown, one request each, after one confirmation.
async function bulk(action) {
  const ids = [...picked].filter((id) => {
    const card = document.getElementById("card-" + id);
    return card && !card.hidden;
  });
  if (!ids.length) { flash("select cards first (the boxes on the cards)", false); return; }
  if (!confirm(`${action === "archive" ? "Archive" : "Retry"} ${ids.length} task(s)? ${ids.join(", ")}`)) return;
  let ok = 0;
  const errors = [];
  for (const id of ids) {
    try {
      const r = await fetch(`/api/tasks/${encodeURIComponent(id)}/${action}`, authed({
        method: "POST",
        headers: { "content-type": "application/json", "x-berth-csrf": "1" },
        body: "{}",
      }));
      const v = await r.json().catch(() => ({ error: "HTTP " + r.status }));
      if (r.ok) { ok++; picked.delete(id); } else errors.push(v.error);
    } catch (e) {
      errors.push(String(e));
    }
  }
  flash(`${action}: ${ok} of ${ids.length} done` + (errors.length ? "; " + errors.join("; ") : ""), !errors.length);
  refresh();
}

function listen() {
  const dot = $("#live");
  // An EventSource sends no headers: the token in its address (never shown in the page's).
  const es = new EventSource("/events?token=" + encodeURIComponent(token));
  es.addEventListener("change", refresh);
  es.onopen = () => { if (dot) { dot.textContent = "●"; dot.className = "on"; } refresh(); };
  es.onerror = () => { if (dot) { dot.textContent = "○"; dot.className = ""; } };
}

// Running timers count on between updates.
function tick() {
  document.querySelectorAll(".timer[data-since]").forEach((el) => {
    const s = Number(el.dataset.since) + 1;
    el.dataset.since = String(s);
    el.textContent = s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s"
      : Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
  });
}

// A task's worker log, read on from where it was.
async function tailLog(pre) {
  let offset = 0;
  for (;;) {
    try {
      const r = await fetch(`/api/tasks/${encodeURIComponent(pre.dataset.task)}/log?offset=${offset}`, authed());
      if (r.ok) {
        const v = await r.json();
        if (v.offset < offset) pre.textContent = "";
        if (v.text) { pre.textContent += v.text; pre.scrollTop = pre.scrollHeight; }
        offset = v.offset;
      }
    } catch (e) { /* the next round tries again */ }
    await new Promise((ok) => setTimeout(ok, 500));
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  if (document.body.dataset.shell && !(await unshell())) return;
  start();
});

function start() {
  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-action]");
    if (b) act(b.dataset.action, taskOf(b));
    const many = ev.target.closest("button[data-bulk]");
    if (many) bulk(many.dataset.bulk);
    // A sandbox's stop or remove, confirmed first; the table is fetched again after it.
    const sb = ev.target.closest("button[data-sandbox-action]");
    if (sb && (!sb.dataset.confirm || confirm(sb.dataset.confirm))) {
      sb.disabled = true;
      post(`/api/sandboxes/${encodeURIComponent(sb.dataset.sandbox)}/${sb.dataset.sandboxAction}`, {});
    }
  });
  document.addEventListener("change", (ev) => {
    const cb = ev.target.closest("input.pick");
    if (cb) { if (cb.checked) picked.add(taskOf(cb)); else picked.delete(taskOf(cb)); countPicked(); }
    if (ev.target.id === "select-all") {
      document.querySelectorAll(".card[data-task]:not([hidden]) input.pick").forEach((p) => {
        p.checked = ev.target.checked;
        if (p.checked) picked.add(taskOf(p)); else picked.delete(taskOf(p));
      });
      countPicked();
    }
  });
  const filter = $("#filter");
  if (filter) {
    filter.value = sessionStorage.getItem("berth-filter") || "";
    filter.addEventListener("input", () => { sessionStorage.setItem("berth-filter", filter.value); applyFilter(); });
  }
  const form = $("#create");
  if (form) form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const d = new FormData(form);
    // The form is cleared only when the task was made: a refused one keeps what was typed.
    if (await post("/api/tasks", {
      board: form.dataset.board, title: d.get("title"), assignee: d.get("assignee"),
      command: d.get("command"), priority: Number(d.get("priority") || 0),
    })) form.reset();
  });
  const edit = $("#edit");
  if (edit) edit.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const d = new FormData(edit), body = {};
    for (const k of ["title", "assignee", "command"]) if (d.get(k)) body[k] = d.get(k);
    if (d.get("priority") !== "") body.priority = Number(d.get("priority"));
    if (await post(`/api/tasks/${encodeURIComponent(edit.dataset.task)}/edit`, body)) edit.reset();
  });
  const dispatch = $("#dispatch");
  if (dispatch) dispatch.addEventListener("click", () => post("/api/dispatch", { board: dispatch.dataset.board }));
  const log = $("#log");
  if (log) tailLog(log);
  settle(document);
  chart(true);
  if ($("[data-fragment]")) listen();
  // A region the board's changes do not announce (the sandboxes: the engine's state) is fetched every few seconds.
  const polled = $("[data-refresh][data-every]");
  if (polled) setInterval(refresh, 1000 * Number(polled.dataset.every));
  setInterval(tick, 1000);
}
