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

// Writes carry the custom header the server requires (a cross-site page cannot send it).
async function post(url, body) {
  try {
    const r = await fetch(url, authed({
      method: "POST",
      headers: { "content-type": "application/json", "x-berth-csrf": "1" },
      body: JSON.stringify(body || {}),
    }));
    const v = await r.json().catch(() => ({ error: "HTTP " + r.status }));
    flash(v.message || v.error, r.ok);
  } catch (e) {
    flash("the dashboard did not answer: " + e, false);
  }
  refresh();
}

// The live part of a page is swapped in again on each change; one fetch at a time, one more if changes came
// meanwhile.
let busy = false, again = false;
async function refresh() {
  const live = $("[data-fragment]") || $("[data-refresh]");
  if (!live) return;
  if (busy) { again = true; return; }
  busy = true;
  try {
    const r = await fetch(live.dataset.fragment || live.dataset.refresh, authed());
    if (r.ok) live.innerHTML = await r.text();
  } finally {
    busy = false;
    if (again) { again = false; refresh(); }
  }
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
    if (b) {
      // A request for changes carries its note, which the task's next run is given.
      const note = b.dataset.action === "request-changes" ? prompt("What should change?") : "";
      if (note !== null) post(`/api/tasks/${encodeURIComponent(b.dataset.task)}/${b.dataset.action}`, note ? { note } : {});
    }
    // A sandbox's stop or remove; the table (not live: its listing asks the engine) is fetched again after it.
    const sb = ev.target.closest("button[data-sandbox-action]");
    if (sb) {
      sb.disabled = true;
      post(`/api/sandboxes/${encodeURIComponent(sb.dataset.sandbox)}/${sb.dataset.sandboxAction}`, {});
    }
  });
  const form = $("#create");
  if (form) form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const d = new FormData(form);
    post("/api/tasks", {
      board: form.dataset.board, title: d.get("title"), assignee: d.get("assignee"),
      command: d.get("command"), priority: Number(d.get("priority") || 0),
    });
    form.reset();
  });
  const edit = $("#edit");
  if (edit) edit.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const d = new FormData(edit), body = {};
    for (const k of ["title", "assignee", "command"]) if (d.get(k)) body[k] = d.get(k);
    if (d.get("priority") !== "") body.priority = Number(d.get("priority"));
    post(`/api/tasks/${encodeURIComponent(edit.dataset.task)}/edit`, body);
    edit.reset();
  });
  const dispatch = $("#dispatch");
  if (dispatch) dispatch.addEventListener("click", () => post("/api/dispatch", { board: dispatch.dataset.board }));
  const log = $("#log");
  if (log) tailLog(log);
  if ($("[data-fragment]")) listen();
  setInterval(tick, 1000);
}
