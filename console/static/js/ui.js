// Small shared pieces of every page: loading and empty states, the error box, status badges.
import { h } from "./h.js";

export function loading(what) {
  return h("p", { class: "loading", role: "status" }, `Loading ${what}…`);
}

export function empty(text, ...extra) {
  return h("div", { class: "empty" }, h("p", {}, text), ...extra);
}

export function errorBox(err) {
  const status = err && err.status ? ` (HTTP ${err.status})` : "";
  return h("div", { class: "error-box", role: "alert" }, `${err ? err.message : "Something went wrong."}${status}`);
}

export function badge(status) {
  return h("span", { class: `badge badge-${status || "none"}` }, status || "none");
}

export function table(caption, headers, rows, { className } = {}) {
  const wrap = h("div", { class: "table-wrap" },
    h("table", { class: className || "" },
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, headers.map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows)));
  labelCells(wrap);
  return wrap;
}

// Each cell carries its column's name: at phone width rows stack and the CSS shows it.
export function labelCells(root) {
  const names = [...root.querySelectorAll("thead th")].map((th) => th.textContent);
  for (const tr of root.querySelectorAll("tbody tr")) {
    [...tr.children].forEach((td, i) => { if (names[i]) td.dataset.label = names[i]; });
  }
}

// A `<dl>` of label / value pairs; values may be nodes.
export function definition(pairs) {
  return h("dl", { class: "definition" },
    pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? h("span", { class: "muted" }, "—"))]));
}

export function pre(value) {
  return h("pre", { class: "code" }, typeof value === "string" ? value : JSON.stringify(value, null, 2));
}

// A one-line message after an action, announced to screen readers.
export function flash(text, kind = "ok") {
  const region = document.getElementById("flash");
  region.replaceChildren(h("p", { class: `flash flash-${kind}` }, text));
}

// Secrets are shown once: a read-only field and a copy button.
export function secretBox(label, secret) {
  const input = h("input", { id: "secret-value", readonly: true, value: secret, class: "secret", "aria-label": label });
  const copy = h("button", {
    type: "button",
    onclick: async () => {
      input.select();
      try {
        await navigator.clipboard.writeText(secret);
        copy.textContent = "Copied";
      } catch {
        copy.textContent = "Press Ctrl+C to copy";
      }
    },
  }, "Copy");
  return h("div", { class: "secret-box", role: "status" },
    h("p", {}, `${label} — shown only now; store it where your endpoint verifies signatures.`),
    h("div", { class: "row" }, input, copy));
}

// What one page hands the next once (a new schedule's secret, a message), in memory only.
export const handoff = {};

// An error kind as the API names it (tests and alerts match on it), with words for the ones
// whose name alone does not say what happened.
const ERROR_WORDS = {
  completion_timeout: "no completion call arrived by the deadline",
};

export function errorKind(kind) {
  return [h("strong", {}, kind), ERROR_WORDS[kind] ? h("div", { class: "small error-words" }, ERROR_WORDS[kind]) : null];
}
