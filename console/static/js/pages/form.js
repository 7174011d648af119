// Create / edit a schedule: live checks as you type, a live DST-annotated preview
// (POST /v1/schedules/preview) as the cron, zone or DST policy changes, and the API's errors
// shown at the field they name.
import { h, option, replace } from "../h.js";
import { api, post } from "../api.js";
import { errorBox, handoff, loading } from "../ui.js";
import { instantToWall, wallToInstant, zoneAbbr } from "../time.js";
import { occurrenceList } from "./schedule.js";

const PREVIEW_DELAY_MS = 250;
// The API's bounds (domain/policies.py MAX_ATTEMPTS_RANGE, domain/timing.py MAX_JITTER_SECONDS);
// tests/console/test_console_form_fields.py compares them with its OpenAPI document.
export const MAX_ATTEMPTS = 50;
export const MAX_JITTER_SECONDS = 3600;
// DESIGN.md §7b "Completion": how long a target may work after accepting, in callback mode.
export const COMPLETION_TIMEOUT_RANGE = [60, 86400];

// API field path -> form control id.
const FIELDS = {
  name: "f-name", description: "f-description", action: "f-action", "target.url": "f-url",
  "target.timeout_seconds": "f-timeout", "target.headers": "f-headers", payload: "f-payload",
  cron: "f-cron", timezone: "f-timezone", dst_policy: "f-dst", "retry_policy.max_attempts": "f-attempts",
  "retry_policy.initial_backoff_seconds": "f-backoff", "breaker.failure_threshold": "f-threshold",
  misfire_policy: "f-misfire", overlap_policy: "f-overlap", run_at: "f-run-at", start_at: "f-start",
  end_at: "f-end", max_runs: "f-max-runs", jitter_seconds: "f-jitter", labels: "f-labels", key: "f-key",
  completion: "f-completion", "completion.mode": "f-completion", "completion.timeout_seconds": "f-completion-timeout",
  "completion.min_duration_seconds": "f-min-duration",
};

// `team=billing` lines (a line without `=` is a label with an empty value) <-> the labels object.
export function parseLabels(text) {
  const out = {};
  for (const line of text.split("\n")) {
    const t = line.trim();
    if (!t) continue;
    const i = t.indexOf("=");
    if (i < 0) out[t] = "";
    else out[t.slice(0, i).trim()] = t.slice(i + 1).trim();
  }
  return out;
}

function labelLines(labels) {
  return Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join("\n");
}

function zones() {
  try {
    return Intl.supportedValuesOf("timeZone");
  } catch {
    return ["UTC"];
  }
}

// The known values, plus the stored one if this console does not know it (an edit keeps it).
function choices(values, current) {
  const all = values.includes(current) ? values : [...values, current];
  return all.map((p) => option(p, p, current));
}

function field(id, label, control, hint) {
  const err = h("p", { class: "field-error", id: `${id}-error`, role: "alert", hidden: true });
  control.id = id;
  control.setAttribute("aria-describedby", `${id}-error${hint ? ` ${id}-hint` : ""}`);
  return h("div", { class: "field" }, h("label", { for: id }, label), control,
    hint ? h("p", { class: "hint", id: `${id}-hint` }, hint) : null, err);
}

export async function formPage(id) {
  let s = null;
  let etag = null;
  if (id) {
    try {
      const r = await api("GET", `/v1/schedules/${encodeURIComponent(id)}`);
      s = r.data;
      etag = r.response.headers.get("ETag");
    } catch (err) {
      return h("section", {}, h("h1", {}, "Edit schedule"), errorBox(err));
    }
  }
  const v = (x, d) => (x === undefined || x === null ? d : x);
  const c = {
    name: h("input", { value: v(s?.name, ""), required: true, maxlength: 200, autocomplete: "off" }),
    description: h("input", { value: v(s?.description, "") }),
    labels: h("textarea", { rows: 2, placeholder: "team=billing\nenv=prod", spellcheck: "false" }),
    // The key addresses a schedule (PUT by key): set when it is created, never changed.
    key: h("input", { value: v(s?.key, ""), maxlength: 128, autocomplete: "off", spellcheck: "false", disabled: Boolean(s) }),
    action: h("select", {}, option("webhook", "webhook (POST to a URL)", v(s?.action, "webhook")), option("event", "event (emit schedule.triggered)", v(s?.action, "webhook"))),
    url: h("input", { type: "url", value: v(s?.target?.url, ""), placeholder: "https://example.com/hook" }),
    timeout: h("input", { type: "number", min: 1, max: 60, value: v(s?.target?.timeout_seconds, 10) }),
    headers: h("textarea", { rows: 2, placeholder: '{"X-Team": "ops"}' }),
    payload: h("textarea", { rows: 3, placeholder: '{"report": "daily"}' }),
    kind: h("select", {}, option("cron", "recurring (cron)", s?.run_at ? "once" : "cron"), option("once", "once (a single run)", s?.run_at ? "once" : "cron")),
    cron: h("input", { value: s ? v(s.cron, "") : "0 3 * * *", autocomplete: "off", spellcheck: "false" }),
    runAt: h("input", { type: "datetime-local", step: 1 }),
    start: h("input", { type: "datetime-local", step: 1 }),
    end: h("input", { type: "datetime-local", step: 1 }),
    maxRuns: h("input", { type: "number", min: 1, step: 1, value: v(s?.max_runs, ""), placeholder: "no limit" }),
    jitter: h("input", { type: "number", min: 0, max: MAX_JITTER_SECONDS, step: 1, value: v(s?.jitter_seconds, 0) }),
    timezone: h("input", { value: v(s?.timezone, Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC"), list: "zones", required: true, autocomplete: "off" }),
    dst: h("select", {}, choices(["shift", "skip", "literal"], v(s?.dst_policy, "shift"))),
    attempts: h("input", { type: "number", min: 1, max: MAX_ATTEMPTS, value: v(s?.retry_policy?.max_attempts, 5) }),
    backoff: h("input", { type: "number", min: 1, step: "any", value: v(s?.retry_policy?.initial_backoff_seconds, 10) }),
    threshold: h("input", { type: "number", min: 1, value: v(s?.breaker?.failure_threshold, 5) }),
    misfire: h("select", {}, choices(["fire_once", "skip", "fire_all"], v(s?.misfire_policy, "fire_once"))),
    overlap: h("select", {}, choices(["allow", "skip", "buffer_one"], v(s?.overlap_policy, "allow"))),
    after: h("input", { type: "date" }),
    completion: h("select", {},
      option("response", "when the target answers 2xx", v(s?.completion?.mode, "response")),
      option("callback", "when the target calls back (long jobs)", v(s?.completion?.mode, "response"))),
    completionTimeout: h("input", { type: "number", min: COMPLETION_TIMEOUT_RANGE[0], max: COMPLETION_TIMEOUT_RANGE[1], step: 1, value: v(s?.completion?.timeout_seconds, 3600) }),
    minDuration: h("input", { type: "number", min: 0, step: 1, value: v(s?.completion?.min_duration_seconds, ""), placeholder: "none" }),
  };
  c.labels.value = labelLines(s?.labels);
  if (s?.target?.headers && Object.keys(s.target.headers).length) c.headers.value = JSON.stringify(s.target.headers);
  if (s && s.payload !== null && s.payload !== undefined) c.payload.value = JSON.stringify(s.payload, null, 2);
  // Instants are typed as wall time in the schedule's zone.
  const zone = () => c.timezone.value.trim() || "UTC";
  const wallOf = (iso) => { try { return instantToWall(iso, s?.timezone || "UTC"); } catch { return ""; } };
  c.runAt.value = wallOf(s?.run_at);
  c.start.value = wallOf(s?.start_at);
  c.end.value = wallOf(s?.end_at);
  const general = h("div", { id: "form-error" });
  const zoneHint = (id) => h("p", { class: "hint zone-hint", id: `${id}-zone` });
  const cronField = field("f-cron", "Cron expression", c.cron, "minute hour day-of-month month day-of-week, e.g. 0 3 * * 1-5");
  const runAtField = field("f-run-at", "Run at", c.runAt, "The one run, wall time in the schedule's zone.");
  const startField = field("f-start", "Start (optional)", c.start, "No run before this.");
  const endField = field("f-end", "End (optional)", c.end, "No run after this.");
  const recurringOnly = h("div", { class: "field-pair" },
    field("f-max-runs", "Max runs (optional)", c.maxRuns, "Stops after this many occurrences."),
    field("f-jitter", "Jitter (seconds)", c.jitter, `Each run is delayed by a fixed 0–${MAX_JITTER_SECONDS} s offset (less than the gap between runs).`));
  const zoneHints = [runAtField, startField, endField].map((f) => {
    const input = f.querySelector("input");
    const hint = zoneHint(input.id);
    f.insertBefore(hint, f.querySelector(".field-error"));
    input.setAttribute("aria-describedby", `${input.getAttribute("aria-describedby")} ${hint.id}`);
    return hint;
  });
  const preview = h("div", { id: "preview", "aria-live": "polite" });
  const submit = h("button", { type: "submit", class: "primary" }, s ? "Save changes" : "Create schedule");
  const callbackOnly = h("div", { class: "field-pair" },
    field("f-completion-timeout", "Completion timeout (seconds)", c.completionTimeout, `${COMPLETION_TIMEOUT_RANGE[0]}–${COMPLETION_TIMEOUT_RANGE[1]}; no call by then is a failed attempt.`),
    field("f-min-duration", "Minimum duration (seconds, optional)", c.minDuration, "A completion sooner than this is flagged too fast."));
  const webhookOnly = h("fieldset", {}, h("legend", {}, "Webhook"),
    field("f-url", "Target URL", c.url),
    field("f-timeout", "Timeout (seconds)", c.timeout),
    field("f-headers", "Headers (JSON object)", c.headers, "Sent with every delivery; optional."),
    field("f-completion", "A run ends", c.completion, "Callback: a 2xx only means accepted; the target POSTs to the run's X-Run-Complete-Url when done."),
    callbackOnly);
  const form = h("form", { class: "form card", novalidate: true },
    general,
    field("f-name", "Name", c.name),
    field("f-description", "Description", c.description),
    field("f-key", "Key", c.key, s ? "Set when the schedule was created; it does not change." : "Optional; your own unique id for it, e.g. billing/nightly."),
    field("f-labels", "Labels", c.labels, "One key=value per line; filter the list by them."),
    field("f-action", "Action", c.action),
    webhookOnly,
    field("f-payload", "Payload (JSON)", c.payload, "Optional; the webhook body or the event's data."),
    h("fieldset", {}, h("legend", {}, "When"),
      field("f-kind", "Runs", c.kind),
      cronField,
      runAtField,
      field("f-timezone", "Time zone", c.timezone, "IANA name, e.g. Europe/Paris; the times below are wall times there"),
      field("f-dst", "DST policy", c.dst, "shift: a missing wall time fires at the transition; skip: it does not fire; literal: repeated times fire twice"),
      h("datalist", { id: "zones" }, zones().map((z) => h("option", { value: z }))),
      h("div", { class: "field-pair" }, startField, endField),
      recurringOnly),
    h("fieldset", {}, h("legend", {}, "Delivery"),
      field("f-attempts", "Max attempts", c.attempts),
      field("f-backoff", "First retry after (seconds)", c.backoff),
      field("f-threshold", "Pause after this many failed runs in a row", c.threshold),
      field("f-misfire", "Misfire policy", c.misfire),
      field("f-overlap", "Overlap policy", c.overlap)),
    h("div", { class: "row" }, submit, h("a", { href: s ? `#/schedules/${encodeURIComponent(s.id)}` : "#/schedules", class: "button" }, "Cancel")));
  const showAction = () => { webhookOnly.hidden = c.action.value !== "webhook"; };
  c.action.addEventListener("change", showAction);
  showAction();
  const showCompletion = () => { callbackOnly.hidden = c.completion.value !== "callback"; };
  c.completion.addEventListener("change", showCompletion);
  showCompletion();
  const once = () => c.kind.value === "once";
  const showKind = () => {
    cronField.hidden = once();
    runAtField.hidden = !once();
    recurringOnly.hidden = once();
  };
  c.kind.addEventListener("change", showKind);
  showKind();
  // Which zone the wall times are read in, with its abbreviation at that time.
  const showZones = () => {
    for (const [hint, input] of [[zoneHints[0], c.runAt], [zoneHints[1], c.start], [zoneHints[2], c.end]]) {
      const iso = wallToInstant(input.value, zone());
      let abbr = "";
      try { abbr = iso ? ` (${zoneAbbr(new Date(iso), zone())})` : ""; } catch { abbr = ""; }
      hint.textContent = `In ${zone()}${abbr}`;
    }
  };
  for (const el of [c.runAt, c.start, c.end, c.timezone]) el.addEventListener("input", showZones);
  showZones();

  const setError = (fid, text) => {
    const el = document.getElementById(`${fid}-error`) || form.querySelector(`#${fid}-error`);
    if (!el) return false;
    el.textContent = text || "";
    el.hidden = !text;
    form.querySelector(`#${fid}`)?.setAttribute("aria-invalid", text ? "true" : "false");
    return true;
  };
  const clearErrors = () => {
    for (const el of form.querySelectorAll(".field-error")) { el.hidden = true; el.textContent = ""; }
    for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    replace(general);
  };
  const json = (el, fid, what) => {
    if (!el.value.trim()) return { ok: true, value: undefined };
    try {
      const value = JSON.parse(el.value);
      if (what === "object" && (typeof value !== "object" || value === null || Array.isArray(value))) throw new Error("not an object");
      setError(fid, "");
      return { ok: true, value };
    } catch {
      setError(fid, what === "object" ? "Must be a JSON object, e.g. {\"X-Team\": \"ops\"}" : "Must be valid JSON");
      return { ok: false };
    }
  };
  // Live checks of what the browser can know; the API has the last word.
  const local = () => {
    let ok = true;
    const need = (el, fid, text) => { const bad = !el.value.trim(); setError(fid, bad ? text : ""); ok = ok && !bad; };
    need(c.name, "f-name", "A name is required.");
    if (once()) need(c.runAt, "f-run-at", "A date and time is required for a one-shot schedule.");
    else need(c.cron, "f-cron", "A cron expression is required.");
    need(c.timezone, "f-timezone", "A time zone is required.");
    if (c.action.value === "webhook") need(c.url, "f-url", "A target URL is required for a webhook.");
    ok = json(c.headers, "f-headers", "object").ok && ok;
    ok = json(c.payload, "f-payload", "any").ok && ok;
    return ok;
  };
  for (const key of ["name", "url", "headers", "payload"]) c[key].addEventListener("change", local);

  // The timing fields, shared by the body and the preview. An edit sends null to clear one.
  const timing = () => {
    const at = (el) => (el.value ? wallToInstant(el.value, zone()) || el.value : null);
    const out = {};
    if (once()) {
      out.run_at = at(c.runAt);
      if (s?.cron) out.cron = null;
    } else {
      out.cron = c.cron.value.trim();
      if (s?.run_at) out.run_at = null;
      out.max_runs = c.maxRuns.value === "" ? null : Number(c.maxRuns.value);
      out.jitter_seconds = c.jitter.value === "" ? 0 : Number(c.jitter.value);
    }
    out.start_at = at(c.start);
    out.end_at = at(c.end);
    if (!s) for (const k of Object.keys(out)) if (out[k] === null) delete out[k];
    return out;
  };

  // Sent when callback mode is chosen, or to a server that shows the field (an edit back to
  // `response`); an unchanged default is left out.
  const completionBody = () => {
    if (c.completion.value !== "callback") return s?.completion ? { mode: "response" } : null;
    const out = { mode: "callback", timeout_seconds: Number(c.completionTimeout.value) };
    if (c.minDuration.value !== "") out.min_duration_seconds = Number(c.minDuration.value);
    return out;
  };

  const body = () => {
    // An edit sends whole sub-objects built on the stored ones, so fields this form does not
    // show (max_backoff_seconds, …) keep their values.
    const out = {
      name: c.name.value.trim(),
      description: c.description.value.trim() || null,
      timezone: c.timezone.value.trim(),
      dst_policy: c.dst.value,
      retry_policy: { ...(s?.retry_policy || {}), max_attempts: Number(c.attempts.value), initial_backoff_seconds: Number(c.backoff.value) },
      breaker: { ...(s?.breaker || {}), failure_threshold: Number(c.threshold.value) },
      misfire_policy: c.misfire.value,
      overlap_policy: c.overlap.value,
      labels: parseLabels(c.labels.value),
    };
    Object.assign(out, timing());
    if (!s) out.action = c.action.value;
    if (!s && c.key.value.trim()) out.key = c.key.value.trim();
    if (c.action.value === "webhook") {
      out.target = { ...(s?.target || {}), url: c.url.value.trim(), timeout_seconds: Number(c.timeout.value) };
      const headers = json(c.headers, "f-headers", "object").value;
      if (headers) out.target.headers = headers;
      else if (s?.target) out.target.headers = {};
      const completion = completionBody();
      if (completion) out.completion = completion;
    }
    const payload = json(c.payload, "f-payload", "any").value;
    if (payload !== undefined) out.payload = payload;
    return out;
  };

  const showProblem = (err) => {
    let placed = false;
    for (const [path, text] of Object.entries(err.fields)) {
      const fid = FIELDS[path] || FIELDS[path.split(".")[0]];
      if (fid && setError(fid, text)) placed = true;
    }
    if (!placed || ![400, 422].includes(err.status)) replace(general, errorBox(err));
    form.querySelector("[aria-invalid=true]")?.focus();
  };

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearErrors();
    if (!local()) {
      form.querySelector("[aria-invalid=true]")?.focus();
      return;
    }
    submit.disabled = true;
    try {
      if (s) {
        await api("PATCH", `/v1/schedules/${encodeURIComponent(s.id)}`, { body: body(), headers: etag ? { "If-Match": etag } : {} });
        location.hash = `#/schedules/${encodeURIComponent(s.id)}`;
      } else {
        const created = await post("/v1/schedules/", body());
        handoff.secret = created.secret;
        handoff.secretFor = created.id;
        location.hash = `#/schedules/${encodeURIComponent(created.id)}`;
      }
    } catch (err) {
      showProblem(err);
    } finally {
      submit.disabled = false;
    }
  });

  // Live preview.
  let timer = null;
  let inflight = null;
  let previewAvailable = true;
  const refresh = async () => {
    if (!previewAvailable) return;
    if (inflight) inflight.abort();
    inflight = new AbortController();
    const req = { ...timing(), timezone: c.timezone.value.trim(), dst_policy: c.dst.value, count: 10 };
    for (const k of Object.keys(req)) if (req[k] === null) delete req[k];
    if (!(req.cron || req.run_at) || !req.timezone) return replace(preview, h("p", { class: "muted" }, once() ? "Enter a date and time and a time zone." : "Enter a cron expression and a time zone."));
    if (c.after.value) req.after = `${c.after.value}T00:00:00Z`;
    replace(preview, loading("preview"));
    try {
      const out = await post("/v1/schedules/preview", req, { signal: inflight.signal });
      for (const fid of ["f-cron", "f-timezone", "f-dst", "f-run-at", "f-start", "f-end", "f-max-runs", "f-jitter"]) setError(fid, "");
      replace(preview, out.items.length ? occurrenceList(out.items, out.timezone) : h("p", { class: "muted" }, "No occurrence."));
    } catch (err) {
      if (err.name === "AbortError") return;
      if (err.status === 404 || err.status === 405) {
        previewAvailable = false;
        return replace(preview, h("p", { class: "muted" }, "Preview is not available on this server."));
      }
      replace(preview, h("p", { class: "muted" }, "No preview until the timing fields are valid."));
      for (const [path, text] of Object.entries(err.fields || {})) {
        const fid = FIELDS[path];
        if (fid) setError(fid, text);
      }
      if (!Object.keys(err.fields || {}).length) replace(preview, errorBox(err));
    }
  };
  const schedulePreview = () => { clearTimeout(timer); timer = setTimeout(refresh, PREVIEW_DELAY_MS); };
  for (const el of [c.kind, c.cron, c.runAt, c.timezone, c.dst, c.start, c.end, c.maxRuns, c.jitter, c.after]) {
    el.addEventListener("input", schedulePreview);
    el.addEventListener("change", schedulePreview);
  }
  refresh();

  return h("section", {},
    h("h1", {}, s ? `Edit “${s.name}”` : "New schedule"),
    h("div", { class: "grid form-grid" }, form,
      h("aside", { class: "card" }, h("h2", {}, "Next occurrences"),
        h("div", { class: "field" }, h("label", { for: "f-after" }, "Preview from (date, UTC)"), Object.assign(c.after, { id: "f-after" })),
        preview)));
}
