// A schedule's history: its versions newest first (who, when, what made the change, each changed
// field from → to), a page at a time, Restore on any older version (with a confirmation); and
// one version's page (`#/schedules/{id}/versions/{n}`), which runs link to by their
// `schedule_version`. Values are shown as compact JSON text; a secret never has one.
import { h, replace } from "../h.js";
import { api, get, post, query } from "../api.js";
import { timeEl } from "../time.js";
import { badge, definition, empty, errorBox, flash, handoff, labelCells, loading, pre, table } from "../ui.js";

const PAGE = 20;
const SHORT = 60; // characters of a value shown inline; the rest on hover
const TITLE_MAX = 2000; // the hover text is bounded too

const SOURCES = {
  api: "API call",
  apply: "apply (schedules as code)",
  breaker: "breaker (failures in a row)",
  quota: "quota (plan limits)",
  suspension: "tenant suspension",
  planner: "planner (no occurrence left)",
};

export const sourceText = (source) => SOURCES[source] || source;

export const versionHref = (scheduleId, n) =>
  `#/schedules/${encodeURIComponent(scheduleId)}/versions/${encodeURIComponent(n)}`;

function compact(value) {
  if (value === undefined) return "—";
  const text = JSON.stringify(value);
  return text === undefined ? String(value) : text;
}

function valueEl(value, cls) {
  const text = compact(value);
  if (text.length <= SHORT) return h("code", { class: cls }, text);
  return h("code", { class: `${cls} truncated`, title: text.slice(0, TITLE_MAX) }, `${text.slice(0, SHORT)}…`);
}

export function changeList(changes) {
  if (!changes || !changes.length) return h("span", { class: "muted" }, "created");
  return h("ul", { class: "changes" }, changes.map((c) => h("li", {},
    h("strong", { class: "field-name" }, c.field), ": ",
    c.field === "secret" && !("to" in c)
      ? h("span", { class: "muted" }, "secret changed")
      : [valueEl(c.from, "from"), " → ", valueEl(c.to, "to")])));
}

// The History card of the schedule page. `s` is the schedule as read (its `version` is current).
export function historyCard(s) {
  const path = `/v1/schedules/${encodeURIComponent(s.id)}`;
  const rows = h("tbody", {});
  const box = h("div", { id: "history" }, loading("history"));
  const more = h("button", { type: "button", hidden: true }, "Load more");
  let cursor = null;
  const next = async () => {
    more.disabled = true;
    try {
      const p = await get(`${path}/versions${query({ limit: PAGE, cursor })}`);
      for (const v of p.items) rows.appendChild(versionRow(s, path, v));
      labelCells(box);
      cursor = p.next_cursor;
      more.hidden = !cursor;
      if (!rows.children.length) replace(box, empty("No versions recorded."));
    } catch (err) {
      replace(box, errorBox(err));
    } finally {
      more.disabled = false;
    }
  };
  more.addEventListener("click", next);
  const t = table("Versions", ["Version", "When", "Who", "Source", "Changes", ""], [], { className: "versions" });
  t.querySelector("tbody").replaceWith(rows);
  replace(box, t, more);
  next();
  return h("div", { class: "card" }, h("h2", { id: "history-title" }, "History"), box);
}

function versionRow(s, path, v) {
  const current = v.version === s.version;
  return h("tr", { dataset: { version: String(v.version) } },
    h("td", { class: "num" }, h("a", { href: versionHref(s.id, v.version) }, `v${v.version}`),
      current ? h("span", { class: "small muted" }, " current") : null),
    h("td", {}, timeEl(v.at, s.timezone)),
    h("td", { class: "actor" }, v.actor),
    h("td", {}, sourceText(v.source)),
    h("td", {}, changeList(v.changes)),
    h("td", {}, current ? null : restoreControl(s, path, v.version)));
}

// Restore asks first; on success the page reloads with the new version on top.
export function restoreControl(s, path, n, { afterRestore } = {}) {
  const confirmBox = h("div", { class: "confirm", hidden: true, role: "alertdialog", "aria-label": `Confirm restore of version ${n}` },
    h("p", {}, `Restore version ${n}'s definition? It becomes a new version; runs are re-planned if its timing differs.`),
    h("button", { type: "button", class: "primary", onclick: async (e) => {
      const btn = e.currentTarget;
      btn.disabled = true;
      try {
        const out = await post(`${path}/versions/${n}/restore`);
        handoff.flash = `Restored version ${n} as version ${out.version}.`;
        if (afterRestore) afterRestore(out);
        else window.dispatchEvent(new HashChangeEvent("hashchange"));
      } catch (err) {
        flash(`${err.message}${err.status ? ` (HTTP ${err.status})` : ""}`, "error");
      } finally {
        btn.disabled = false;
      }
    } }, `Yes, restore v${n}`),
    h("button", { type: "button", onclick: () => { confirmBox.hidden = true; open.focus(); } }, "Cancel"));
  const open = h("button", { type: "button", class: "restore", onclick: () => {
    confirmBox.hidden = false;
    confirmBox.querySelector("button").focus();
  } }, "Restore…");
  return h("div", {}, open, confirmBox);
}

// One version: who, when, what changed, and the whole definition as of it.
export async function versionPage(scheduleId, n) {
  const path = `/v1/schedules/${encodeURIComponent(scheduleId)}`;
  const back = h("a", { href: `#/schedules/${encodeURIComponent(scheduleId)}` }, "the schedule");
  let s = null;
  let v;
  try {
    [s, v] = await Promise.all([
      api("GET", path).then((r) => r.data, (err) => (err.status === 404 ? null : Promise.reject(err))),
      get(`${path}/versions/${encodeURIComponent(n)}`),
    ]);
  } catch (err) {
    return h("section", {}, h("h1", {}, `Version ${n}`), errorBox(err), h("p", {}, "Back to ", back));
  }
  const zone = (s && s.timezone) || v.definition.timezone || "UTC";
  const current = s && s.version === v.version;
  const info = definition([
    ["When", timeEl(v.at, zone)],
    ["Who", h("span", { class: "actor" }, v.actor)],
    ["Source", sourceText(v.source)],
    ["State", [badge(v.state), v.paused_reason ? ` ${v.paused_reason}` : ""]],
    ["Changes", changeList(v.changes)],
  ]);
  return h("section", {},
    h("p", { class: "crumbs" }, h("a", { href: `#/schedules/${encodeURIComponent(scheduleId)}` }, v.definition.name), " › version ", String(v.version)),
    h("div", { class: "page-head" },
      h("h1", {}, `Version ${v.version}`, current ? h("span", { class: "small muted" }, " (current)") : null),
      s && !current ? restoreControl(s, path, v.version, {
        afterRestore: () => { location.hash = `#/schedules/${encodeURIComponent(scheduleId)}`; },
      }) : null),
    h("div", { class: "card" }, info),
    h("div", { class: "card" }, h("h2", {}, "Definition as of this version"), pre(v.definition)));
}
