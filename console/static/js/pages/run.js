// One run: every attempt in order (status code, latency, error, response excerpt), replay. While
// the run is unfinished the page re-reads it every second (at most two minutes). A replay links
// to the run it replays; a replayed run to its replays (one request: the schedule's newest 100
// replay runs scheduled since it).
import { h, replace } from "../h.js";
import { get, post, query } from "../api.js";
import { timeEl } from "../time.js";
import { badge, definition, empty, errorBox, errorKind, flash, loading, table } from "../ui.js";
import { attemptCompletion, completionRows } from "./completion.js";
import { versionHref } from "./history.js";

const POLL_MS = 1000;
const MAX_POLLS = 120;
const FINISHED = new Set(["succeeded", "failed", "skipped"]);

export async function runPage(scheduleId, runId) {
  const path = `/v1/schedules/${encodeURIComponent(scheduleId)}/runs/${encodeURIComponent(runId)}`;
  let zone = "UTC";
  let name = scheduleId;
  try {
    const s = await get(`/v1/schedules/${encodeURIComponent(scheduleId)}`);
    zone = s.timezone;
    name = s.name;
  } catch (err) {
    return h("section", {}, h("h1", {}, "Run"), errorBox(err));
  }
  const body = h("div", {}, loading("run"));
  const replays = h("p", { id: "replayed-as", hidden: true });
  const section = h("section", {},
    h("p", { class: "crumbs" }, h("a", { href: `#/schedules/${encodeURIComponent(scheduleId)}` }, name), " › run"),
    h("div", { class: "page-head" }, h("h1", {}, "Run ", h("code", {}, runId)),
      h("button", { type: "button", class: "primary", id: "replay", onclick: async (e) => {
        e.currentTarget.disabled = true;
        try {
          const run = await post(`${path}/replay`);
          location.hash = `#/schedules/${encodeURIComponent(scheduleId)}/runs/${encodeURIComponent(run.id)}`;
        } catch (err) {
          flash(`${err.message}${err.status ? ` (HTTP ${err.status})` : ""}`, "error");
        } finally {
          e.target.disabled = false;
        }
      } }, "Replay")),
    replays,
    body);
  let polls = 0;
  const tick = async () => {
    let run;
    try {
      run = await get(path);
    } catch (err) {
      replace(body, errorBox(err));
      return;
    }
    replace(body, render(run, zone));
    if (polls === 0) replayedAs(replays, run);
    if (!FINISHED.has(run.status) && ++polls < MAX_POLLS && section.isConnected !== false) {
      setTimeout(() => { if (section.isConnected) tick(); }, POLL_MS);
    }
  };
  tick();
  return section;
}

function render(run, zone) {
  const def = definition([
    ["Status", [badge(run.status), run.skip_reason ? ` ${run.skip_reason}` : ""]],
    ["Trigger", run.trigger],
    run.replay_of ? ["Replay of", h("a", { href: runHref(run.schedule_id, run.replay_of), class: "replay-of" }, run.replay_of)] : null,
    ["Scheduled for", timeEl(run.scheduled_for, zone)],
    run.schedule_version ? ["Schedule version", h("a", { href: versionHref(run.schedule_id, run.schedule_version), class: "run-version" }, `v${run.schedule_version}`)] : null,
    run.due_at !== run.scheduled_for ? ["Due at", timeEl(run.due_at, zone)] : null,
    ["Started", timeEl(run.started_at, zone)],
    ["Finished", timeEl(run.finished_at, zone)],
    run.next_attempt_at ? ["Next attempt", timeEl(run.next_attempt_at, zone)] : null,
    ...completionRows(run, zone),
  ]);
  const attempts = run.attempts.length
    ? table("Attempts", ["#", "Started", "Status code", "Latency", "Error", "Response excerpt"], run.attempts.map((a) => h("tr", {},
      h("td", { class: "num" }, String(a.number)),
      h("td", {}, timeEl(a.started_at, zone)),
      h("td", { class: "num" }, a.status_code === null ? "—" : String(a.status_code)),
      h("td", { class: "num" }, `${a.duration_ms} ms`),
      h("td", {}, a.error ? [errorKind(a.error.kind), a.error.message ? h("div", { class: "small" }, a.error.message) : null] : "—"),
      h("td", {}, a.response_excerpt ? h("pre", { class: "excerpt" }, a.response_excerpt) : h("span", { class: "muted" }, "—"),
        attemptCompletion(a, zone)))), { className: "attempts" })
    : empty(FINISHED.has(run.status) ? "No attempt was made." : "No attempt yet; this page refreshes.");
  return h("div", {}, h("div", { class: "card" }, def), h("div", { class: "card" }, h("h2", {}, "Attempts"), attempts));
}

const runHref = (sid, rid) => `#/schedules/${encodeURIComponent(sid)}/runs/${encodeURIComponent(rid)}`;

async function replayedAs(el, run) {
  try {
    const p = await get(`/v1/schedules/-/runs${query({ schedule_id: run.schedule_id, trigger: "replay", from: run.scheduled_for, limit: 100 })}`);
    const found = p.items.filter((r) => r.replay_of === run.id).reverse();
    if (!found.length) return;
    replace(el, "Replayed as ", found.map((r, i) => [i ? ", " : "", h("a", { href: runHref(r.schedule_id, r.id), class: "replayed-as" }, r.id)]));
    el.hidden = false;
  } catch {
    // Only a pointer: the run itself is shown either way.
  }
}
