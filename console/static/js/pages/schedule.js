// One schedule: its definition, actions, the next 10 occurrences (none while paused), the run
// timeline (aggregated by the API) and its runs with filters. A schedule its breaker paused
// leads with why: the failing run, its error and response excerpt, and Resume.
import { h, option, replace } from "../h.js";
import { api, get, post, query } from "../api.js";
import { cronInWords } from "../cron.js";
import { timeEl, wallToInstant } from "../time.js";
import { badge, definition, empty, errorBox, flash, handoff, labelCells, loading, pre, secretBox, table } from "../ui.js";
import { stats } from "./stats.js";
import { labelChips, pausedText } from "./schedules.js";
import { historyCard, versionHref } from "./history.js";
import { completionNote, completionText } from "./completion.js";
import { ledgerHref } from "./ledger.js";

const runHref = (s, runId) => `#/schedules/${encodeURIComponent(s.id)}/runs/${encodeURIComponent(runId)}`;

export async function schedulePage(id) {
  const path = `/v1/schedules/${encodeURIComponent(id)}`;
  let s, etag;
  try {
    const r = await api("GET", path);
    s = r.data;
    etag = r.response.headers.get("ETag");
  } catch (err) {
    return h("section", {}, h("h1", {}, "Schedule"), errorBox(err), h("p", {}, h("a", { href: "#/schedules" }, "All schedules")));
  }
  const secret = h("div", {});
  if (handoff.secret && handoff.secretFor === id) {
    replace(secret, secretBox("Signing secret", handoff.secret));
    delete handoff.secret;
  }
  const words = cronInWords(s.cron);
  const head = h("div", { class: "page-head" },
    h("h1", {}, s.name, " ", badge(s.state)),
    h("div", { class: "row" },
      h("a", { href: ledgerHref(id), class: "button", id: "ledger-link" }, "Ledger"),
      h("a", { href: `#/schedules/${encodeURIComponent(id)}/edit`, class: "button" }, "Edit")));
  const def = definition([
    s.description ? ["Description", s.description] : null,
    s.key ? ["Key", h("code", { class: "wrap", id: "schedule-key" }, s.key)] : null,
    s.labels && Object.keys(s.labels).length ? ["Labels", labelChips(s.labels)] : null,
    ["State", s.paused_reason ? `${s.state} — ${pausedText(s)}` : s.state],
    ["Schedule", s.cron ? [words ? `${words} — ` : "", h("code", {}, s.cron)] : ["once at ", timeEl(s.run_at, s.timezone)]],
    ["Time zone", s.timezone],
    ["DST policy", s.dst_policy],
    s.start_at || s.end_at ? ["Between", [s.start_at ? timeEl(s.start_at, s.timezone) : "any time", " and ", s.end_at ? timeEl(s.end_at, s.timezone) : "no end"]] : null,
    s.max_runs ? ["Max runs", String(s.max_runs)] : null,
    s.jitter_seconds ? ["Jitter", `a fixed delay of 0–${s.jitter_seconds} s per run`] : null,
    ["Next run", s.state === "paused" ? h("span", { class: "muted" }, "none while paused") : timeEl(s.next_occurrence_at, s.timezone)],
    ["Last run", s.last_run
      ? h("span", { class: "last-run" }, badge(s.last_run.status), " ", h("a", { href: runHref(s, s.last_run.id) }, timeEl(s.last_run.scheduled_for, s.timezone)))
      : h("span", { class: "muted" }, "no finished run yet")],
    ["Action", s.action],
    s.target ? ["Target", h("code", { class: "wrap" }, s.target.url)] : null,
    s.target && s.target.headers && Object.keys(s.target.headers).length ? ["Headers", pre(s.target.headers)] : null,
    s.target ? ["Timeout", `${s.target.timeout_seconds} s`] : null,
    s.completion ? ["Completion", h("span", { id: "completion-mode" }, completionText(s.completion))] : null,
    ["Payload", s.payload === null || s.payload === undefined ? null : pre(s.payload)],
    ["Retries", `${s.retry_policy.max_attempts} attempts, backoff ${s.retry_policy.initial_backoff_seconds}–${s.retry_policy.max_backoff_seconds} s`],
    ["Misfire / overlap", `${s.misfire_policy} / ${s.overlap_policy}`],
    ["Breaker", `pauses after ${s.breaker.failure_threshold} failed runs in a row`],
    ["Created", timeEl(s.created_at, s.timezone)],
    ["Updated", timeEl(s.updated_at, s.timezone)],
  ]);
  const act = actions(s, path, etag, secret);
  const upcoming = s.state === "paused"
    ? h("div", { class: "card" }, h("h2", {}, "Upcoming occurrences"),
      empty("None while paused. Resuming plans runs again from its next occurrence."))
    : h("div", { class: "card" }, h("h2", {}, "Next 10 occurrences"), occurrences(path, s.timezone));
  return h("section", {}, head, secret,
    s.state === "paused" && s.paused_reason === "breaker" ? breakerCard(s, act.resume) : null,
    act.box,
    h("div", { class: "grid" },
      h("div", { class: "card" }, h("h2", {}, "Definition"), def),
      upcoming),
    h("div", { class: "card" }, h("h2", {}, "Run timeline"), timelineCard(path, s.timezone)),
    backfillCard(path, s),
    h("div", { class: "card" }, h("h2", {}, "Runs"), runsCard(path, s)),
    historyCard(s));
}

function actions(s, path, etag, secret) {
  const reload = () => window.dispatchEvent(new HashChangeEvent("hashchange"));
  const guard = (fn) => async (e) => {
    e.preventDefault();
    const btn = e.submitter || e.currentTarget;
    btn.disabled = true;
    try {
      await fn();
    } catch (err) {
      flash(`${err.message}${err.status ? ` (HTTP ${err.status})` : ""}`, "error");
    } finally {
      btn.disabled = false;
    }
  };
  const reason = h("input", { id: "pause-reason", maxlength: 500, placeholder: "maintenance" });
  const pause = h("form", { class: "inline", onsubmit: guard(async () => {
    await post(`${path}/pause`, reason.value ? { reason: reason.value } : {});
    reload();
    flash("Paused.");
  }) },
  h("label", { for: "pause-reason" }, "Pause reason"), reason, h("button", { type: "submit" }, "Pause"));
  const resume = h("button", { type: "button", onclick: guard(async () => {
    await post(`${path}/resume`);
    reload();
    flash("Resumed.");
  }) }, "Resume");
  const trigger = h("button", { type: "button", class: "primary", onclick: guard(async () => {
    const run = await post(`${path}/trigger`);
    location.hash = `#/schedules/${encodeURIComponent(s.id)}/runs/${encodeURIComponent(run.id)}`;
  }) }, "Trigger now");
  const rotate = h("button", { type: "button", onclick: guard(async () => {
    const out = await post(`${path}/secret/rotate`);
    replace(secret, secretBox("New signing secret (the old one keeps signing for a grace period)", out.secret));
  }) }, "Rotate secret");
  const confirmBox = h("div", { class: "confirm", hidden: true, role: "alertdialog", "aria-label": "Confirm delete" },
    h("p", {}, `Delete “${s.name}”? Its runs stay readable until retention, the schedule does not.`),
    h("button", { type: "button", class: "danger", onclick: guard(async () => {
      await api("DELETE", path, { headers: etag ? { "If-Match": etag } : {} });
      handoff.flash = `Deleted “${s.name}”.`;
      location.hash = "#/schedules";
    }) }, "Yes, delete"),
    h("button", { type: "button", onclick: () => { confirmBox.hidden = true; del.focus(); } }, "Cancel"));
  const del = h("button", { type: "button", class: "danger", onclick: () => {
    confirmBox.hidden = false;
    confirmBox.querySelector("button").focus();
  } }, "Delete…");
  // A breaker pause shows Resume in its explanation (breakerCard), not twice.
  const breaker = s.state === "paused" && s.paused_reason === "breaker";
  const box = h("div", { class: "actions card" },
    trigger, s.state === "paused" && !breaker ? resume : s.state === "active" ? pause : null, s.action === "webhook" ? rotate : null, del, confirmBox);
  return { box, resume };
}

function breakerCard(s, resume) {
  const n = s.consecutive_failures;
  const threshold = s.breaker.failure_threshold;
  const r = s.last_run;
  const why = n > 1
    ? `It failed ${n} times in a row, which reached its breaker's threshold (${threshold}), so it was paused and no runs are planned.`
    : `Its last run failed, and its breaker pauses it after ${threshold} failed run${threshold === 1 ? "" : "s"}, so no runs are planned.`;
  const failing = r ? definition([
    ["Failing run", [badge(r.status), " ", h("a", { href: runHref(s, r.id) }, timeEl(r.scheduled_for, s.timezone))]],
    r.status_code ? ["HTTP status", String(r.status_code)] : null,
    r.error ? ["Error", h("code", { class: "wrap" }, r.error.message ? `${r.error.kind}: ${r.error.message}` : r.error.kind)] : null,
    ["Attempts", String(r.attempt_count)],
    r.response_excerpt ? ["Response", h("pre", { class: "excerpt" }, r.response_excerpt)] : null,
  ]) : null;
  resume.classList.add("primary");
  return h("section", { class: "card breaker", "aria-labelledby": "breaker-title" },
    h("h2", { id: "breaker-title" }, "Paused by its breaker"),
    h("p", {}, why),
    failing,
    h("p", { class: "row" }, resume, h("span", { class: "muted small" }, "Fix the target first: resuming resets the count and plans runs from the next occurrence.")));
}

function occurrences(path, zone) {
  const box = h("div", {}, loading("occurrences"));
  get(`${path}/occurrences?count=10`).then((o) => {
    if (!o.items.length) return replace(box, empty("No future occurrence."));
    replace(box, occurrenceList(o.items, zone));
  }, (err) => replace(box, errorBox(err)));
  return box;
}

const DST_TEXT = { shifted: "DST: shifted (wall time did not exist)", first_pass: "DST: first pass", second_pass: "DST: second pass" };

// `extra(o)` adds to an item (the backfill preview marks the ones that already ran).
export function occurrenceList(items, zone, extra = () => null) {
  return h("ol", { class: "occurrences" }, items.map((o) => h("li", {},
    timeEl(o.utc, zone),
    o.dst ? h("span", { class: `dst dst-${o.dst}` }, DST_TEXT[o.dst] || o.dst) : null,
    o.due_at && o.due_at !== o.utc ? h("span", { class: "small muted" }, " due ", timeEl(o.due_at, zone)) : null,
    extra(o))));
}

// Backfill: runs for past occurrences in (from, to], a dry run listing them first.
function backfillCard(path, s) {
  const zone = s.timezone;
  const from = h("input", { id: "bf-from", type: "datetime-local", step: 1, required: true });
  const to = h("input", { id: "bf-to", type: "datetime-local", step: 1, required: true });
  const existing = h("input", { id: "bf-existing", type: "checkbox" });
  const out = h("div", { id: "bf-result", "aria-live": "polite" });
  const err = h("div", {});
  const body = (dry) => {
    const req = { from: wallToInstant(from.value, zone) || from.value, to: wallToInstant(to.value, zone) || to.value };
    if (dry) req.dry_run = true;
    if (existing.checked) req.include_existing = true;
    return req;
  };
  const run = async (btn, fn) => {
    btn.disabled = true;
    replace(err);
    try {
      await fn();
    } catch (e) {
      replace(err, errorBox(e));
    } finally {
      btn.disabled = false;
    }
  };
  const create = h("button", { type: "button", class: "primary", id: "bf-create" }, "Create runs");
  create.addEventListener("click", () => run(create, async () => {
    const r = await post(`${path}/backfill`, body(false));
    replace(out, h("p", { class: "flash flash-ok" }, `Created ${r.created} run${r.created === 1 ? "" : "s"}; ${r.existing} already had one.`));
    flash(`Backfill: ${r.created} run${r.created === 1 ? "" : "s"} created.`);
  }));
  const preview = h("button", { type: "submit" }, "Preview (dry run)");
  const form = h("form", { class: "backfill", novalidate: true, onsubmit: (e) => {
    e.preventDefault();
    if (!from.value || !to.value) return replace(err, errorBox({ message: "Choose both From and To." }));
    run(preview, async () => {
      const r = await post(`${path}/backfill`, body(true));
      if (!r.items.length) return replace(out, empty("No occurrence in this range."));
      const fresh = r.items.filter((o) => !o.exists || existing.checked).length;
      create.textContent = `Create ${fresh} run${fresh === 1 ? "" : "s"}`;
      create.disabled = fresh === 0;
      replace(out,
        h("p", {}, `${r.items.length} occurrence${r.items.length === 1 ? "" : "s"}; ${fresh} would get a new run.`),
        occurrenceList(r.items, zone, (o) => (o.exists ? h("span", { class: "badge badge-none" }, "already ran") : null)),
        h("div", { class: "row" }, create));
    });
  } },
  h("div", { class: "field-pair" },
    h("div", { class: "field" }, h("label", { for: "bf-from" }, "From (after)"), from),
    h("div", { class: "field" }, h("label", { for: "bf-to" }, "To (up to)"), to)),
  h("p", { class: "hint" }, `Wall times in ${zone}; only past occurrences.`),
  h("div", { class: "row" }, h("label", {}, existing, " Also re-run occurrences that already ran"), preview),
  err);
  return h("div", { class: "card" }, h("h2", {}, "Backfill"), form, out);
}

function timelineCard(path, zone) {
  const chart = h("div", {}, loading("timeline"));
  const buttons = ["day", "week", "month"].map((w) => h("button", {
    type: "button", "aria-pressed": String(w === "day"), dataset: { window: w },
    onclick: () => show(w),
  }, w === "day" ? "Day" : w === "week" ? "Week" : "Month"));
  const show = async (w) => {
    for (const b of buttons) b.setAttribute("aria-pressed", String(b.dataset.window === w));
    replace(chart, loading("timeline"));
    try {
      replace(chart, stats.timeline(await get(`${path}/runs/stats${query({ window: w, tz: zone })}`)));
    } catch (err) {
      replace(chart, errorBox(err));
    }
  };
  show("day");
  return h("div", {}, h("div", { class: "segmented", role: "group", "aria-label": "Window" }, buttons), chart);
}

const STATUSES = ["", "pending", "in_progress", "retrying", "succeeded", "failed", "skipped"];
const TRIGGERS = ["", "schedule", "manual", "replay", "backfill"];

function runsCard(path, s) {
  const statusSel = h("select", { id: "run-status" }, STATUSES.map((v) => option(v, v || "any", "")));
  const triggerSel = h("select", { id: "run-trigger" }, TRIGGERS.map((v) => option(v, v || "any", "")));
  const list = h("div", {}, loading("runs"));
  const load = () => runList(list, path, s, { status: statusSel.value, trigger: triggerSel.value });
  statusSel.addEventListener("change", load);
  triggerSel.addEventListener("change", load);
  load();
  return h("div", {},
    h("div", { class: "filters" },
      h("div", { class: "field" }, h("label", { for: "run-status" }, "Status"), statusSel),
      h("div", { class: "field" }, h("label", { for: "run-trigger" }, "Trigger"), triggerSel)),
    list);
}

export function runRow(r, zone, extra = []) {
  return h("tr", {},
    h("td", {}, h("a", { href: `#/schedules/${encodeURIComponent(r.schedule_id)}/runs/${encodeURIComponent(r.id)}` }, timeEl(r.scheduled_for, zone))),
    h("td", {}, r.trigger),
    h("td", {}, badge(r.status), r.skip_reason ? h("span", { class: "small muted" }, ` ${r.skip_reason}`) : null, completionNote(r)),
    h("td", { class: "num" }, String(r.attempt_count)),
    h("td", {}, timeEl(r.finished_at, zone)),
    extra);
}

// The version that planned the run, linked to its page in the history.
export function versionCell(r) {
  return h("td", { class: "num" }, r.schedule_version
    ? h("a", { href: versionHref(r.schedule_id, r.schedule_version), class: "run-version" }, `v${r.schedule_version}`)
    : h("span", { class: "muted" }, "—"));
}

async function runList(box, path, s, filters) {
  replace(box, loading("runs"));
  const rows = h("tbody", {});
  const more = h("button", { type: "button", hidden: true }, "Load more");
  let cursor = null;
  const next = async () => {
    more.disabled = true;
    try {
      const p = await get(`${path}/runs${query({ limit: 50, cursor, ...filters })}`);
      for (const r of p.items) rows.appendChild(runRow(r, s.timezone, [versionCell(r)]));
      labelCells(box);
      cursor = p.next_cursor;
      more.hidden = !cursor;
      if (!rows.children.length) replace(box, empty("No runs yet. Trigger one, or wait for the next occurrence."));
    } catch (err) {
      replace(box, errorBox(err));
    } finally {
      more.disabled = false;
    }
  };
  more.addEventListener("click", next);
  const t = table("Runs", ["Scheduled for", "Trigger", "Status", "Attempts", "Finished", "Version"], []);
  t.querySelector("tbody").replaceWith(rows);
  replace(box, t, more);
  await next();
}
