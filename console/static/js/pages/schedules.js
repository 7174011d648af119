// Schedules: every schedule of the tenant (pages of 100 until the cursor ends), filtered by
// state, action and labels (`team=billing env`: each term a `?label=`, all must hold) through
// the API and by name in the page. Labels show as chips (text only). Next and last run come with each
// schedule (`next_occurrence_at`: runs planned ahead count as next; `last_run`: the last
// finished one). The 7-day bar comes from /runs/stats?window=week, fetched only for rows
// scrolled into view (a few requests at a time), so a thousand schedules cost a thousand rows,
// not a thousand requests.
import { h, option, replace } from "../h.js";
import { get, query } from "../api.js";
import { cronInWords } from "../cron.js";
import { timeEl } from "../time.js";
import { badge, empty, errorBox, loading, table } from "../ui.js";
import { route } from "../router.js";
import { stats } from "./stats.js";

const MAX_PAGES = 100;
const STATS_CONCURRENCY = 4;

export async function schedulesPage() {
  const { params } = route();
  const state = params.get("state") || "";
  const action = params.get("action") || "";
  const labelText = params.get("label") || "";
  const labels = labelTerms(labelText);
  const labelInput = h("input", { id: "labels", type: "search", value: labelText, placeholder: "team=billing env",
    onchange: (e) => setFilter("label", e.target.value.trim()) });
  const search = h("input", { id: "search", type: "search", value: params.get("q") || "", placeholder: "nightly…" });
  const setFilter = (key, value) => {
    const p = route().params;
    if (value) p.set(key, value); else p.delete(key);
    p.delete("q");
    if (search.value) p.set("q", search.value);
    location.hash = `#/schedules${p.toString() ? `?${p}` : ""}`;
  };
  const stateSel = h("select", { id: "state", onchange: (e) => setFilter("state", e.target.value) },
    option("", "any", state), option("active", "active", state), option("paused", "paused", state), option("completed", "completed", state));
  const actionSel = h("select", { id: "action", onchange: (e) => setFilter("action", e.target.value) },
    option("", "any", action), option("webhook", "webhook", action), option("event", "event", action));
  const body = h("div", {}, loading("schedules"));
  const count = h("p", { class: "muted", id: "count", role: "status" });
  const page = h("section", {},
    h("div", { class: "page-head" }, h("h1", {}, "Schedules"), h("a", { href: "#/schedules/new", class: "button primary" }, "New schedule")),
    h("form", { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() },
      h("div", { class: "field" }, h("label", { for: "search" }, "Search by name"), search),
      h("div", { class: "field" }, h("label", { for: "state" }, "State"), stateSel),
      h("div", { class: "field" }, h("label", { for: "action" }, "Action"), actionSel),
      h("div", { class: "field" }, h("label", { for: "labels" }, "Labels"), labelInput)),
    count, body);
  load(body, count, search, { state, action, label: labels });
  return page;
}

async function load(body, count, search, filters) {
  const items = [];
  try {
    let cursor = null;
    for (let i = 0; i < MAX_PAGES; i++) {
      const p = await get(`/v1/schedules/${query({ limit: 100, cursor, ...filters })}`);
      items.push(...p.items);
      cursor = p.next_cursor;
      if (!cursor) break;
    }
  } catch (err) {
    replace(body, errorBox(err));
    return;
  }
  if (!items.length) {
    replace(body, empty(filters.state || filters.action || filters.label.length ? "No schedule matches these filters." : "No schedules yet.",
      h("a", { href: "#/schedules/new", class: "button" }, "Create your first schedule")));
    count.textContent = "";
    return;
  }
  const rows = items.map(row);
  const noMatch = h("p", { class: "empty", hidden: true }, "No schedule name matches the search.");
  replace(body, table("Schedules", ["Name", "State", "Schedule", "Time zone", "Next run", "Last run", "Last 7 days"], rows.map((r) => r.tr), { className: "schedules" }), noMatch);
  const apply = () => {
    const needle = search.value.trim().toLowerCase();
    let shown = 0;
    for (const r of rows) {
      const hit = !needle || r.name.includes(needle);
      r.tr.hidden = !hit;
      if (hit) shown++;
    }
    noMatch.hidden = shown > 0;
    count.textContent = `${shown} of ${items.length} schedules`;
  };
  search.addEventListener("input", apply);
  apply();
  observeStats(rows);
  // Read by the browser test: ms from navigation start until the list is interactive.
  document.body.dataset.schedulesReadyAt = String(performance.now());
}

function lastRun(s) {
  const r = s.last_run;
  if (!r) return h("span", { class: "muted" }, "no runs yet");
  return [badge(r.status), " ",
    h("a", { href: `#/schedules/${encodeURIComponent(s.id)}/runs/${encodeURIComponent(r.id)}` }, timeEl(r.scheduled_for, s.timezone))];
}

function nextRun(s) {
  if (s.state === "paused") return h("span", { class: "muted" }, "paused");
  return h("span", { class: "next-run" }, timeEl(s.next_occurrence_at, s.timezone));
}

function row(s) {
  const words = cronInWords(s.cron);
  const last = h("td", { class: "last-run" }, lastRun(s));
  const bar = h("td", { class: "week" }, h("span", { class: "muted" }, "…"));
  const tr = h("tr", { dataset: { id: s.id } },
    h("td", {}, h("a", { href: `#/schedules/${encodeURIComponent(s.id)}`, class: "name" }, s.name), labelChips(s.labels)),
    h("td", {}, badge(s.state), s.paused_reason ? h("div", { class: "muted small" }, pausedText(s)) : null),
    h("td", {}, s.cron ? [words ? h("div", {}, words) : null, h("code", {}, s.cron)] : h("span", {}, "once")),
    h("td", {}, s.timezone),
    h("td", {}, nextRun(s)),
    last, bar);
  return { tr, s, last, bar, name: s.name.toLowerCase() };
}

function observeStats(rows) {
  const byTr = new Map(rows.map((r) => [r.tr, r]));
  const queue = [];
  let active = 0;
  const pump = () => {
    while (active < STATS_CONCURRENCY && queue.length) {
      const r = queue.shift();
      active++;
      get(`/v1/schedules/${encodeURIComponent(r.s.id)}/runs/stats?window=week`)
        .then((st) => fill(r, st))
        .catch(() => replace(r.bar, h("span", { class: "muted" }, "unavailable")))
        .finally(() => { active--; pump(); });
    }
  };
  const io = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (!e.isIntersecting) continue;
      io.unobserve(e.target);
      queue.push(byTr.get(e.target));
    }
    pump();
  }, { rootMargin: "200px" });
  for (const r of rows) io.observe(r.tr);
}

function fill(r, st) {
  replace(r.bar, stats.weekBar(st));
}

// `team=billing env` or `team=billing, env`: one `?label=` term each.
export function labelTerms(text) {
  return text.split(/[\s,]+/).filter(Boolean);
}

// A schedule's labels as chips: `key=value`, text only.
export function labelChips(labels) {
  const entries = Object.entries(labels || {});
  if (!entries.length) return null;
  return h("div", { class: "labels" },
    entries.map(([k, v]) => h("span", { class: "chip label", title: `label ${k}` }, v ? `${k}=${v}` : k)));
}

// The breaker's pause says what tripped it; a tenant's own reason is shown as given.
export function pausedText(s) {
  if (s.paused_reason !== "breaker") return s.paused_reason;
  const n = s.consecutive_failures;
  return n > 1 ? `breaker: ${n} failed runs in a row` : "breaker: its run failed";
}
