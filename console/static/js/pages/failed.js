// Failed runs across all schedules (the dead letters), newest first: each run's last error,
// filters (schedule, trigger, time range: kept in the address, so a filtered list can be shared
// or reloaded), replay one, or select several and replay them in one go.
import { h, option, replace } from "../h.js";
import { get, post, query } from "../api.js";
import { route } from "../router.js";
import { empty, errorBox, errorKind, flash, labelCells, loading, table } from "../ui.js";
import { runRow } from "./schedule.js";

// One bulk replay is at most this many runs (two pages of 50): each is a POST, sent a few at a
// time, and a batch that size is still one the reader can check row by row.
export const MAX_BULK = 100;
const BULK_CONCURRENCY = 4;
const SCHEDULE_PAGES = 10; // schedules for the filter: 10 pages of 100
const TRIGGERS = ["", "schedule", "manual", "replay", "backfill"];

const runHref = (sid, rid) => `#/schedules/${encodeURIComponent(sid)}/runs/${encodeURIComponent(rid)}`;

// `datetime-local` values are read as UTC (the page's times are UTC) and back.
const toInstant = (local) => (local ? `${local.length === 16 ? `${local}:00` : local}Z` : "");
const toLocal = (instant) => (instant ? instant.replace(/Z$/, "").slice(0, 16) : "");

export async function failedPage() {
  const { params } = route();
  const filters = {
    schedule_id: params.get("schedule_id") || "",
    trigger: params.get("trigger") || "",
    from: params.get("from") || "",
    to: params.get("to") || "",
  };
  const scheduleSel = h("select", { id: "failed-schedule" }, option("", "any", filters.schedule_id));
  const triggerSel = h("select", { id: "failed-trigger" }, TRIGGERS.map((v) => option(v, v || "any", filters.trigger)));
  const fromIn = h("input", { id: "failed-from", type: "datetime-local", value: toLocal(filters.from) });
  const toIn = h("input", { id: "failed-to", type: "datetime-local", value: toLocal(filters.to) });
  const apply = () => {
    const p = new URLSearchParams();
    const chosen = { schedule_id: scheduleSel.value, trigger: triggerSel.value, from: toInstant(fromIn.value), to: toInstant(toIn.value) };
    for (const [k, v] of Object.entries(chosen)) if (v) p.set(k, v);
    location.hash = `#/failed${p.toString() ? `?${p}` : ""}`;
  };
  for (const el of [scheduleSel, triggerSel, fromIn, toIn]) el.addEventListener("change", apply);
  const clear = h("button", { type: "button", class: "link", onclick: () => { location.hash = "#/failed"; } }, "Clear filters");
  clear.hidden = !Object.values(filters).some(Boolean);

  const names = new Map();
  const name = (id) => {
    if (!names.has(id)) names.set(id, get(`/v1/schedules/${encodeURIComponent(id)}`).then((s) => s.name, () => id));
    return names.get(id);
  };
  fillSchedules(scheduleSel, filters.schedule_id, names);

  const box = h("div", {}, loading("failed runs"));
  const section = h("section", {},
    h("h1", {}, "Failed runs"),
    h("p", { class: "muted" }, "Runs of every schedule that failed after their last attempt. Times are UTC."),
    h("form", { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() },
      h("div", { class: "field" }, h("label", { for: "failed-schedule" }, "Schedule"), scheduleSel),
      h("div", { class: "field" }, h("label", { for: "failed-trigger" }, "Trigger"), triggerSel),
      h("div", { class: "field" }, h("label", { for: "failed-from" }, "Scheduled from (UTC)"), fromIn),
      h("div", { class: "field" }, h("label", { for: "failed-to" }, "Scheduled to (UTC)"), toIn),
      clear),
    box);
  list(box, filters, name);
  return section;
}

// The filter's choices: the tenant's schedules by name (a chosen id not among them stays chosen).
async function fillSchedules(select, chosen, names) {
  const items = [];
  try {
    let cursor = null;
    for (let i = 0; i < SCHEDULE_PAGES; i++) {
      const p = await get(`/v1/schedules/${query({ limit: 100, cursor })}`);
      items.push(...p.items);
      cursor = p.next_cursor;
      if (!cursor) break;
    }
  } catch {
    // The filter still works by id from the address; the list shows its own error.
  }
  items.sort((a, b) => a.name.localeCompare(b.name));
  for (const s of items) {
    names.set(s.id, Promise.resolve(s.name));
    select.appendChild(option(s.id, s.name, chosen));
  }
  if (chosen && !items.some((s) => s.id === chosen)) select.appendChild(option(chosen, chosen, chosen));
}

function list(box, filters, name) {
  const rows = h("tbody", {});
  const more = h("button", { type: "button", hidden: true }, "Load more");
  const selected = new Map(); // run id -> { run, checkbox, outcome, replayButton }
  const all = h("input", { type: "checkbox", id: "select-all" });
  const count = h("span", { class: "muted small", id: "selected-count", role: "status" });
  const bulk = h("button", { type: "button", class: "primary", id: "replay-selected", disabled: true }, "Replay selected");
  const entries = [];
  let cursor = null;

  const refresh = () => {
    const n = selected.size;
    count.textContent = n ? `${n} selected${n >= MAX_BULK ? ` (at most ${MAX_BULK} at once)` : ""}` : "";
    bulk.disabled = n === 0;
    bulk.textContent = n ? `Replay ${n} selected` : "Replay selected";
    const open = entries.filter((e) => !e.checkbox.disabled);
    all.checked = open.length > 0 && open.every((e) => e.checkbox.checked);
    all.indeterminate = !all.checked && open.some((e) => e.checkbox.checked);
  };
  const full = () => flash(`At most ${MAX_BULK} runs are replayed at once: replay these first.`, "error");
  // False when the batch is full (the box stays unticked).
  const choose = (entry, on) => {
    if (on && !selected.has(entry.run.id) && selected.size >= MAX_BULK) {
      entry.checkbox.checked = false;
      return false;
    }
    entry.checkbox.checked = on;
    if (on) selected.set(entry.run.id, entry);
    else selected.delete(entry.run.id);
    return true;
  };
  all.addEventListener("change", () => {
    let refused = false;
    for (const e of entries) {
      if (!e.checkbox.disabled && e.checkbox.checked !== all.checked && !choose(e, all.checked)) refused = true;
    }
    if (refused) full();
    refresh();
  });

  const replayOne = async (entry) => {
    const r = entry.run;
    entry.replay.disabled = true;
    replace(entry.outcome, h("span", { class: "muted" }, "Replaying…"));
    try {
      const run = await post(`/v1/schedules/${encodeURIComponent(r.schedule_id)}/runs/${encodeURIComponent(r.id)}/replay`);
      replace(entry.outcome, "Replayed: ", h("a", { href: runHref(r.schedule_id, run.id) }, "new run"));
      entry.checkbox.checked = false;
      entry.checkbox.disabled = true;
      selected.delete(r.id);
      return true;
    } catch (err) {
      replace(entry.outcome, errorBox(err));
      entry.replay.disabled = false;
      return false;
    }
  };
  bulk.addEventListener("click", async () => {
    const batch = [...selected.values()].slice(0, MAX_BULK);
    bulk.disabled = true;
    all.disabled = true;
    let ok = 0;
    const queue = [...batch];
    const worker = async () => {
      for (let e = queue.shift(); e; e = queue.shift()) if (await replayOne(e)) ok += 1;
    };
    await Promise.all(Array.from({ length: Math.min(BULK_CONCURRENCY, batch.length) }, worker));
    all.disabled = false;
    refresh();
    const failed = batch.length - ok;
    flash(`Replayed ${ok} of ${batch.length} runs${failed ? `; ${failed} failed (see their rows)` : ""}.`, failed ? "error" : "ok");
  });

  const next = async () => {
    more.disabled = true;
    try {
      const p = await get(`/v1/schedules/-/runs${query({ status: "failed", limit: 50, cursor, ...filters })}`);
      for (const r of p.items) {
        const cell = h("td", {}, h("a", { href: `#/schedules/${encodeURIComponent(r.schedule_id)}` }, r.schedule_id));
        name(r.schedule_id).then((n) => { cell.firstChild.textContent = n; });
        const entry = { run: r, outcome: h("div", { class: "small", role: "status" }) };
        entry.checkbox = h("input", {
          type: "checkbox", class: "pick", "aria-label": `Select run ${r.id}`,
          onchange: (e) => { if (!choose(entry, e.target.checked)) full(); refresh(); },
        });
        entry.replay = h("button", { type: "button", onclick: async () => { await replayOne(entry); refresh(); } }, "Replay");
        const tr = runRow(r, "UTC", [cell, h("td", {}, lastError(r)), h("td", { class: "outcome" }, entry.replay, entry.outcome)]);
        if (r.replay_of) {
          tr.children[1].append(h("div", { class: "small" }, "of ", h("a", { href: runHref(r.schedule_id, r.replay_of), class: "replay-of" }, r.replay_of)));
        }
        tr.prepend(h("td", { class: "pick-cell" }, entry.checkbox));
        entries.push(entry);
        rows.appendChild(tr);
      }
      labelCells(box);
      cursor = p.next_cursor;
      more.hidden = !cursor;
      refresh();
      if (!rows.children.length) {
        const filtered = Object.values(filters).some(Boolean);
        replace(box, empty(filtered ? "No failed runs match these filters." : "No failed runs. Runs that used up their attempts appear here."));
      }
    } catch (err) {
      replace(box, errorBox(err));
    } finally {
      more.disabled = false;
    }
  };
  more.addEventListener("click", next);
  const t = table("Failed runs", ["Select", "Scheduled for (UTC)", "Trigger", "Status", "Attempts", "Finished", "Schedule", "Last error", ""], [], { className: "failed-runs" });
  t.querySelector("tbody").replaceWith(rows);
  replace(box,
    h("div", { class: "row bulk" }, h("label", { class: "inline" }, all, "Select all shown"), bulk, count),
    t, more);
  next();
}

// The run's newest attempt: its error kind, HTTP status and message (the status once, when the
// message already says it).
function lastError(r) {
  const code = r.last_status_code === null || r.last_status_code === undefined ? null : `HTTP ${r.last_status_code}`;
  const err = r.last_error;
  if (!code && !err) return h("span", { class: "muted" }, "—");
  const message = err && err.message ? err.message : null;
  const detail = [message && code && message.includes(code) ? null : code, message].filter(Boolean).join(" — ");
  return h("div", { class: "last-error" },
    err ? errorKind(err.kind) : h("strong", {}, code),
    detail && (err || detail !== code) ? h("div", { class: "small" }, detail) : null);
}
