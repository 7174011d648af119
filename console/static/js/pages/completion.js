// Completion callbacks (DESIGN.md §7b "Completion"): in callback mode a 2xx only says the target
// accepted the job; the run stays in_progress until the target calls back or `completion_deadline`
// passes. These pieces show that on the schedule, its runs and a run's page. Callback text
// (`detail`, `output`) is tenant data: only ever text, and bounded here as well as by the API.
import { h } from "../h.js";
import { timeEl } from "../time.js";

const OUTPUT_MAX = 20_000; // characters of pretty JSON shown (the API bounds output to 16 KiB)

export const isCallback = (completion) => Boolean(completion && completion.mode === "callback");

// The schedule's "Completion" line.
export function completionText(completion) {
  if (!isCallback(completion)) return "when the target answers 2xx";
  const least = completion.min_duration_seconds;
  return `by a completion call within ${completion.timeout_seconds} s of acceptance`
    + (least ? `; sooner than ${least} s is flagged too fast` : "");
}

// A run accepted by its target and not yet completed.
export const awaiting = (run) => run.status === "in_progress" && Boolean(run.completion_deadline) && !run.completed_at;

// The callback's fields, on the run (the last completion call) and on each attempt.
const detailOf = (x) => x.completion_detail ?? null;
const outputOf = (x) => x.completion_output;

export function outputEl(output) {
  let text = JSON.stringify(output, null, 2);
  if (text === undefined) text = String(output);
  const cut = text.length > OUTPUT_MAX;
  return h("div", {},
    h("pre", { class: "code completion-output" }, cut ? text.slice(0, OUTPUT_MAX) : text),
    cut ? h("p", { class: "hint" }, `Cut at ${OUTPUT_MAX.toLocaleString("en-US")} characters.`) : null);
}

// Rows for the run page's definition list.
export function completionRows(run, zone) {
  const rows = [];
  if (awaiting(run)) {
    rows.push(["Completion", h("span", { class: "awaiting" }, "accepted, awaiting completion until ", timeEl(run.completion_deadline, zone))]);
  } else if (run.completion_deadline && !run.completed_at) {
    rows.push(["Completion deadline", timeEl(run.completion_deadline, zone)]);
  }
  if (run.completed_at) rows.push(["Completed", timeEl(run.completed_at, zone)]);
  if (run.too_fast) rows.push(["Too fast", h("span", { class: "badge badge-failed too-fast" }, "completed sooner than its minimum duration")]);
  const detail = detailOf(run);
  if (detail) rows.push(["Completion detail", h("p", { class: "completion-detail wrap" }, detail)]);
  const output = outputOf(run);
  if (output !== undefined && output !== null) rows.push(["Completion output", outputEl(output)]);
  return rows;
}

// A short note beside a run's status in lists.
export function completionNote(run) {
  if (awaiting(run)) return h("span", { class: "small awaiting" }, " accepted, awaiting completion");
  if (run.too_fast) return h("span", { class: "small too-fast" }, " too fast");
  return null;
}

// An attempt's completion, for the attempts table.
export function attemptCompletion(a, zone) {
  const detail = detailOf(a);
  const output = outputOf(a);
  if (!a.completed_at && !detail && (output === undefined || output === null)) return null;
  return h("div", { class: "small attempt-completion" },
    a.completed_at ? ["completed ", timeEl(a.completed_at, zone)] : null,
    detail ? h("div", { class: "completion-detail wrap" }, detail) : null,
    output !== undefined && output !== null ? outputEl(output) : null);
}
