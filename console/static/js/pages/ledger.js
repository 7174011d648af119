// A schedule's ledger (DESIGN.md §7b "Ledger"): every occurrence its versions put in a window
// (≤ 31 days, the last 7 by default) and what became of it, one coloured cell each, a row per
// day in the schedule's zone. `missing` (should have a run, has none, no reason) is the alarm.
//
// Size: a `* * * * *` schedule has 10,080 occurrences a week. Up to DOM_LIMIT cells are
// elements (each with its time, outcome and reason as title and aria-label, a link when it has
// a run); above that one canvas draws them, hovering names the one under the pointer and a
// click opens its run, and the list of occurrences needing attention (missing, failed) stays
// text. At most MAX_ITEMS occurrences are fetched (pages of PAGE_SIZE), with a message if cut.
import { h, replace } from "../h.js";
import { get, query } from "../api.js";
import { route } from "../router.js";
import { instantToWall, localText, offsetMinutes, timeEl, wallToInstant } from "../time.js";
import { badge, empty, errorBox, labelCells, loading, table } from "../ui.js";

const PAGE_SIZE = 1000;
const MAX_ITEMS = 50_000; // a 31-day window of a minutely schedule is 44,640
const DOM_LIMIT = 3000;
const ATTENTION_MAX = 200;
const DAY_MS = 86_400_000;
const MAX_WINDOW_DAYS = 31;

// Drawing order too: later outcomes are drawn on top, so a missing or failed one is never hidden
// under a succeeded neighbour on a dense canvas.
const OUTCOMES = ["not_planned", "succeeded", "skipped", "pending", "in_progress", "retrying", "failed", "missing"];
const WORDS = {
  succeeded: "succeeded", failed: "failed", in_progress: "in progress", retrying: "retrying", pending: "pending",
  skipped: "skipped", not_planned: "not planned", missing: "missing",
};
const ATTENTION = new Set(["missing", "failed"]);

const runHref = (sid, rid) => `#/schedules/${encodeURIComponent(sid)}/runs/${encodeURIComponent(rid)}`;
export const ledgerHref = (sid) => `#/schedules/${encodeURIComponent(sid)}/ledger`;

export function describe(o, zone) {
  return `${localText(o.scheduled_for, zone)}: ${WORDS[o.outcome] || o.outcome}${o.reason ? ` (${o.reason})` : ""}`;
}

export async function ledgerPage(id, signal) {
  const path = `/v1/schedules/${encodeURIComponent(id)}`;
  let s;
  try {
    s = await get(path, { signal });
  } catch (err) {
    return h("section", {}, h("h1", {}, "Ledger"), errorBox(err));
  }
  const zone = s.timezone;
  const { params } = route();
  const to = params.get("to") || new Date().toISOString();
  const from = params.get("from") || new Date(Date.parse(to) - 7 * DAY_MS).toISOString();
  const out = h("div", { id: "ledger" }, loading("the ledger"));
  load(out, path, s, from, to, signal);
  return h("section", {},
    h("p", { class: "crumbs" }, h("a", { href: `#/schedules/${encodeURIComponent(id)}` }, s.name), " › ledger"),
    h("h1", {}, "Ledger"),
    h("p", { class: "muted" }, "Every occurrence the schedule's versions put in the window, and what became of it."),
    windowForm(id, zone, from, to),
    out);
}

function windowForm(id, zone, from, to) {
  const go = (f, t) => { location.hash = `${ledgerHref(id)}${query({ from: f, to: t })}`; };
  const last = (days) => () => { const now = Date.now(); go(new Date(now - days * DAY_MS).toISOString(), new Date(now).toISOString()); };
  const fromIn = h("input", { id: "ledger-from", type: "datetime-local", value: instantToWall(from, zone) });
  const toIn = h("input", { id: "ledger-to", type: "datetime-local", value: instantToWall(to, zone) });
  const err = h("p", { class: "field-error", role: "alert", hidden: true, id: "ledger-window-error" });
  const form = h("form", { class: "filters ledger-window", novalidate: true, onsubmit: (e) => {
    e.preventDefault();
    const f = wallToInstant(fromIn.value, zone);
    const t = wallToInstant(toIn.value, zone);
    const span = f && t ? Date.parse(t) - Date.parse(f) : NaN;
    const problem = !f || !t ? "Choose both From and To." : span <= 0 ? "To must be after From."
      : span > MAX_WINDOW_DAYS * DAY_MS ? `A window is at most ${MAX_WINDOW_DAYS} days.` : "";
    err.textContent = problem;
    err.hidden = !problem;
    if (!problem) go(f, t);
  } },
  h("div", { class: "segmented", role: "group", "aria-label": "Window" },
    h("button", { type: "button", onclick: last(1) }, "Last 24 hours"),
    h("button", { type: "button", onclick: last(7) }, "Last 7 days"),
    h("button", { type: "button", onclick: last(MAX_WINDOW_DAYS) }, `Last ${MAX_WINDOW_DAYS} days`)),
  h("div", { class: "field" }, h("label", { for: "ledger-from" }, `From (${zone})`), fromIn),
  h("div", { class: "field" }, h("label", { for: "ledger-to" }, `To (${zone})`), toIn),
  h("div", { class: "field" }, h("button", { type: "submit" }, "Show")),
  err);
  return form;
}

async function fetchAll(path, from, to, signal, progress) {
  const items = [];
  const others = new Map();
  let summary = null;
  let othersTruncated = false;
  let cursor = null;
  let capped = false;
  for (;;) {
    const p = await get(`${path}/ledger${query({ from, to, limit: PAGE_SIZE, cursor })}`, { signal });
    for (const o of p.items) items.push(o);
    for (const r of p.other_runs || []) others.set(r.id, r);
    // The first page carries the whole window's summary and its other runs.
    summary = summary || p.summary || null;
    othersTruncated = othersTruncated || Boolean(p.other_runs_truncated);
    cursor = p.next_cursor;
    if (!cursor) break;
    if (items.length >= MAX_ITEMS) {
      capped = true;
      break;
    }
    progress(items.length);
  }
  return { items, others: [...others.values()], othersTruncated, summary, capped };
}

async function load(box, path, s, from, to, signal) {
  let data;
  const started = performance.now();
  try {
    data = await fetchAll(path, from, to, signal, (n) => replace(box, loading(`the ledger (${n.toLocaleString("en-US")} occurrences so far)`)));
  } catch (err) {
    if (err.name !== "AbortError") replace(box, errorBox(err));
    return;
  }
  const fetched = performance.now();
  const { items, others, othersTruncated, summary, capped } = data;
  // The API's summary counts the whole window (even past the cap); the loaded items otherwise.
  const counts = summary && summary.outcomes ? fromSummary(summary) : countOutcomes(items);
  const grid = h("div", { class: "ledger-grid-wrap" });
  replace(box,
    counts.outcomes.missing ? h("div", { class: "error-box ledger-missing", role: "alert" },
      `${counts.outcomes.missing} occurrence${counts.outcomes.missing === 1 ? " is" : "s are"} missing: ${counts.outcomes.missing === 1 ? "it" : "they"} should have a run and ${counts.outcomes.missing === 1 ? "has" : "have"} none, with no recorded reason.`) : null,
    capped ? h("p", { class: "flash flash-error ledger-capped", role: "status" },
      `Showing the first ${items.length.toLocaleString("en-US")} occurrences of this window (the most the console loads); choose a shorter window to see the rest.`) : null,
    summaryEl(counts),
    legend(),
    items.length ? grid : empty("No occurrence in this window."),
    attention(items, s),
    otherRuns(others, othersTruncated, s));
  if (items.length) drawGrid(grid, items, s);
  box.dataset.fetchMs = String(Math.round(fetched - started));
  box.dataset.renderMs = String(Math.round(performance.now() - fetched));
  box.dataset.count = String(items.length);
}

function countOutcomes(items) {
  const outcomes = {};
  const reasons = {};
  for (const o of items) {
    outcomes[o.outcome] = (outcomes[o.outcome] || 0) + 1;
    if (o.reason) {
      const r = (reasons[o.outcome] ||= {});
      r[o.reason] = (r[o.reason] || 0) + 1;
    }
  }
  return { outcomes, reasons, total: items.length };
}

// `{total, outcomes: {outcome: n}, reasons: {skipped: {...}, not_planned: {...}}}`.
function fromSummary(summary) {
  const reasons = {};
  for (const [outcome, byReason] of Object.entries(summary.reasons || {})) {
    if (byReason && Object.keys(byReason).length) reasons[outcome] = byReason;
  }
  const total = summary.total ?? Object.values(summary.outcomes).reduce((a, b) => a + b, 0);
  return { outcomes: summary.outcomes, reasons, total };
}

function summaryEl(counts) {
  const list = h("ul", { class: "ledger-summary" }, OUTCOMES.slice().reverse().filter((k) => counts.outcomes[k]).map((k) => {
    const why = counts.reasons[k] ? Object.entries(counts.reasons[k]).map(([r, n]) => `${r.replace(/_/g, " ")} ${n}`).join(", ") : "";
    return h("li", { dataset: { outcome: k } }, h("span", { class: `swatch cell-${k}` }),
      h("strong", {}, `${WORDS[k]}: ${counts.outcomes[k].toLocaleString("en-US")}`), why ? ` (${why})` : "");
  }));
  return h("div", { class: "card" }, h("h2", {}, `${counts.total.toLocaleString("en-US")} occurrence${counts.total === 1 ? "" : "s"}`), list);
}

function legend() {
  return h("ul", { class: "legend ledger-legend", "aria-label": "Legend" }, OUTCOMES.slice().reverse().map((k) =>
    h("li", {}, h("span", { class: `swatch cell-${k}`, dataset: { outcome: k } }), WORDS[k])));
}

// Local day and time of day in the zone. Offsets change only on quarter hours, so one lookup per
// quarter hour serves every occurrence in it (a week of minutes: 672 lookups, not 10,080).
function localizer(zone) {
  const Q = 900_000;
  const cache = new Map();
  return (ms) => {
    const k = Math.floor(ms / Q);
    let off = cache.get(k);
    if (off === undefined) {
      off = offsetMinutes(new Date(k * Q), zone);
      cache.set(k, off);
    }
    const local = ms + off * 60_000;
    const day = Math.floor(local / DAY_MS);
    return { day, ms: local - day * DAY_MS };
  };
}

const dayFormat = new Intl.DateTimeFormat("en-US", { timeZone: "UTC", weekday: "short", month: "short", day: "2-digit" });
const dayLabel = (day) => dayFormat.format(new Date(day * DAY_MS));

// Rows of [day, [{o, ms}]] in time order.
function byDay(items, zone) {
  const at = localizer(zone);
  const rows = new Map();
  for (const o of items) {
    const { day, ms } = at(Date.parse(o.scheduled_for));
    if (!rows.has(day)) rows.set(day, []);
    rows.get(day).push({ o, ms });
  }
  return [...rows.entries()].sort((a, b) => a[0] - b[0]);
}

function drawGrid(box, items, s) {
  const rows = byDay(items, s.timezone);
  if (items.length <= DOM_LIMIT) replace(box, cellGrid(rows, s));
  else canvasGrid(box, rows, s, items.length);
}

function cellGrid(rows, s) {
  return h("div", { class: "ledger-grid" }, rows.map(([day, cells]) => h("div", { class: "ledger-row" },
    h("span", { class: "ledger-day" }, dayLabel(day)),
    h("div", { class: "ledger-cells" }, cells.map(({ o }) => {
      const text = describe(o, s.timezone);
      const attrs = { class: `cell cell-${o.outcome}`, title: text, "aria-label": text, dataset: { outcome: o.outcome } };
      return o.run_id ? h("a", { ...attrs, href: runHref(s.id, o.run_id) }) : h("span", { ...attrs, role: "img" });
    })))));
}

const ROW_H = 14;
const ROW_GAP = 4;
const LABEL_W = 96;
const TOP = 18;

function canvasGrid(box, rows, s, total) {
  const canvas = h("canvas", { class: "ledger-canvas", role: "img",
    "aria-label": `${total.toLocaleString("en-US")} occurrences over ${rows.length} days; the occurrences needing attention are listed below.` });
  const hover = h("p", { class: "small ledger-hover", id: "ledger-hover" }, "Point at an occurrence to see it; click to open its run.");
  replace(box, hover, canvas);
  const width = Math.max(360, box.clientWidth || 900);
  const height = TOP + rows.length * (ROW_H + ROW_GAP);
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.width = `${width}px`; // CSSOM, allowed by the CSP
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  const plotW = width - LABEL_W - 4;
  const xOf = (ms) => LABEL_W + Math.floor((ms / DAY_MS) * plotW);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#5b6470";
  for (let hour = 0; hour < 24; hour += 3) ctx.fillText(`${String(hour).padStart(2, "0")}:00`, xOf(hour * 3_600_000), 11);
  const colors = swatchColors();
  const cellW = Math.max(1, Math.min(8, Math.floor(plotW / Math.max(...rows.map(([, c]) => c.length)))));
  rows.forEach(([day, cells], i) => {
    const y = TOP + i * (ROW_H + ROW_GAP);
    ctx.fillStyle = "#5b6470";
    ctx.fillText(dayLabel(day), 0, y + ROW_H - 3);
    ctx.fillStyle = "#eef0f3";
    ctx.fillRect(LABEL_W, y, plotW, ROW_H);
    for (const outcome of OUTCOMES) {
      ctx.fillStyle = colors[outcome];
      const w = outcome === "missing" ? Math.max(cellW, 3) : outcome === "failed" ? Math.max(cellW, 2) : cellW;
      for (const c of cells) if (c.o.outcome === outcome) ctx.fillRect(xOf(c.ms), y, w, ROW_H);
    }
  });
  const at = (e) => {
    const rect = canvas.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const i = Math.floor((e.clientY - rect.top - TOP) / (ROW_H + ROW_GAP));
    if (i < 0 || i >= rows.length || x < LABEL_W) return null;
    return nearest(rows[i][1], ((x - LABEL_W) / plotW) * DAY_MS, (4 / plotW) * DAY_MS + DAY_MS / plotW);
  };
  canvas.addEventListener("mousemove", (e) => {
    const c = at(e);
    hover.textContent = c ? `${describe(c.o, s.timezone)}${c.o.run_id ? " — click to open its run" : ""}` : "Point at an occurrence to see it; click to open its run.";
    canvas.classList.toggle("pointing", Boolean(c && c.o.run_id));
  });
  canvas.addEventListener("click", (e) => {
    const c = at(e);
    if (c && c.o.run_id) location.hash = runHref(s.id, c.o.run_id);
  });
}

// The cell nearest `ms` within `slack`, preferring one needing attention at the same spot.
function nearest(cells, ms, slack) {
  let lo = 0;
  let hi = cells.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (cells[mid].ms < ms) lo = mid + 1;
    else hi = mid;
  }
  let best = null;
  for (let j = Math.max(0, lo - 3); j < Math.min(cells.length, lo + 3); j++) {
    const d = Math.abs(cells[j].ms - ms);
    if (d > slack) continue;
    const rank = ATTENTION.has(cells[j].o.outcome) ? -1 : 0;
    if (!best || rank < best.rank || (rank === best.rank && d < best.d)) best = { c: cells[j], d, rank };
  }
  return best && best.c;
}

function swatchColors() {
  const fallback = { succeeded: "#1a7f37", failed: "#c62828", in_progress: "#b26a00", retrying: "#e0a030", pending: "#7aa7ff",
    skipped: "#8a94a0", not_planned: "#d9dde3", missing: "#d500f9" };
  const out = {};
  for (const k of OUTCOMES) {
    const el = document.querySelector(`.ledger-legend .swatch[data-outcome="${k}"]`);
    const color = el ? getComputedStyle(el).backgroundColor : "";
    out[k] = color && color !== "rgba(0, 0, 0, 0)" ? color : fallback[k];
  }
  return out;
}

function attention(items, s) {
  const bad = items.filter((o) => ATTENTION.has(o.outcome));
  if (!bad.length) return null;
  const shown = bad.slice(-ATTENTION_MAX).reverse();
  return h("div", { class: "card" }, h("h2", {}, "Needing attention"),
    bad.length > shown.length ? h("p", { class: "small muted" }, `The newest ${shown.length} of ${bad.length}.`) : null,
    h("ul", { class: "ledger-attention" }, shown.map((o) => h("li", { dataset: { outcome: o.outcome } },
      h("span", { class: `swatch cell-${o.outcome}` }),
      o.run_id ? h("a", { href: runHref(s.id, o.run_id) }, timeEl(o.scheduled_for, s.timezone)) : timeEl(o.scheduled_for, s.timezone),
      ` ${WORDS[o.outcome]}`, o.reason ? ` (${o.reason})` : "",
      o.version ? h("span", { class: "small muted" }, ` v${o.version}`) : null))));
}

function otherRuns(runs, truncated, s) {
  if (!runs.length) return null;
  const t = table("Other runs", ["Scheduled for", "Trigger", "Status"], runs.map((r) => h("tr", {},
    h("td", {}, r.id ? h("a", { href: runHref(s.id, r.id) }, timeEl(r.scheduled_for, s.timezone)) : timeEl(r.scheduled_for, s.timezone)),
    h("td", {}, r.trigger || "—"),
    h("td", {}, r.status ? badge(r.status) : "—"))), { className: "other-runs" });
  labelCells(t);
  return h("div", { class: "card" }, h("h2", {}, "Other runs in the window"),
    h("p", { class: "small muted" }, "Manual, replay and backfill runs: not occurrences of the schedule."), t,
    truncated ? h("p", { class: "small muted other-runs-truncated" }, `More than ${runs.length} in this window; the schedule's runs list has them all (filter by trigger).`) : null);
}
