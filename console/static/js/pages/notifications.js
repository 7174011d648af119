// Notifications: the in-app inbox (unread first to the eye), webhook subscriptions (create, edit,
// enable/disable, delete, rotate; deliveries with attempts a page at a time, replay) and the
// alert contacts.
import { h, replace } from "../h.js";
import { api, get, post, query } from "../api.js";
import { timeEl } from "../time.js";
import { badge, empty, errorBox, flash, labelCells, loading, secretBox, table } from "../ui.js";

export async function notificationsPage() {
  return h("section", {}, h("h1", {}, "Notifications"),
    h("div", { class: "card" }, h("h2", {}, "Inbox"), inbox()),
    h("div", { class: "card" }, h("h2", {}, "Webhook subscriptions"), subscriptions()),
    h("div", { class: "card" }, h("h2", {}, "Alert contacts"), contacts()));
}

// An alert names this console's pages by their full URL (CONSOLE_PUBLIC_URL, for the email):
// those become links to the hash route; every other character stays text.
function consoleLinks(text) {
  const prefix = `${location.origin}/#/`;
  const parts = [];
  let rest = text;
  for (let i = rest.indexOf(prefix); i >= 0; i = rest.indexOf(prefix)) {
    const url = rest.slice(i).match(/^\S+/)[0];
    parts.push(rest.slice(0, i), h("a", { href: url.slice(location.origin.length + 1) }, url));
    rest = rest.slice(i + url.length);
  }
  parts.push(rest);
  return parts;
}

function inbox() {
  const box = h("div", {}, loading("inbox"));
  const load = async () => {
    try {
      const p = await get("/v1/notifications/?limit=50");
      if (!p.items.length) return replace(box, empty("Nothing yet. Alerts such as a schedule paused by its breaker land here."));
      const unread = p.items.filter((n) => !n.read).length;
      replace(box, h("p", { class: "muted", id: "unread-count" }, `${unread} unread`),
        h("ul", { class: "inbox" }, p.items.map((n) => h("li", { class: n.read ? "read" : "unread" },
          h("div", { class: "row spread" }, h("strong", {}, n.title), timeEl(n.created_at, "UTC")),
          h("p", { class: "body" }, consoleLinks(n.body)),
          n.read ? null : h("button", { type: "button", onclick: async () => {
            await post(`/v1/notifications/${encodeURIComponent(n.id)}/read`);
            // The header's count too (main.js listens).
            window.dispatchEvent(new CustomEvent("console:unread-changed"));
            load();
          } }, "Mark as read")))));
    } catch (err) {
      replace(box, errorBox(err));
    }
  };
  load();
  return box;
}

function subscriptions() {
  const list = h("div", {}, loading("subscriptions"));
  const secret = h("div", {});
  const url = h("input", { id: "sub-url", type: "url", placeholder: "https://example.com/events", required: true });
  const types = h("input", { id: "sub-types", value: "schedule.*" });
  const description = h("input", { id: "sub-description" });
  const errors = {
    url: h("p", { class: "field-error", id: "sub-url-error", role: "alert", hidden: true }),
    event_types: h("p", { class: "field-error", id: "sub-types-error", role: "alert", hidden: true }),
  };
  const general = h("div", {});
  const load = async () => {
    try {
      const p = await get("/v1/subscriptions/?limit=100");
      if (!p.items.length) return replace(list, empty("No subscriptions. Create one to receive every schedule event as a signed webhook."));
      replace(list, h("ul", { class: "subscriptions" }, p.items.map((sub) => subscriptionItem(sub, secret, load))));
    } catch (err) {
      replace(list, errorBox(err));
    }
  };
  const form = h("form", { class: "form", onsubmit: async (e) => {
    e.preventDefault();
    for (const el of Object.values(errors)) el.hidden = true;
    replace(general);
    try {
      const created = await post("/v1/subscriptions/", {
        url: url.value.trim(),
        event_types: types.value.split(",").map((t) => t.trim()).filter(Boolean),
        description: description.value.trim() || null,
      });
      replace(secret, secretBox("Subscription signing secret", created.secret));
      url.value = "";
      load();
    } catch (err) {
      let placed = false;
      for (const [field, text] of Object.entries(err.fields || {})) {
        const el = errors[field.split(".")[0]];
        if (el) { el.textContent = text; el.hidden = false; placed = true; }
      }
      if (!placed) replace(general, errorBox(err));
    }
  } },
  general,
  h("div", { class: "field" }, h("label", { for: "sub-url" }, "Endpoint URL"), url, errors.url),
  h("div", { class: "field" }, h("label", { for: "sub-types" }, "Event types (comma-separated)"), types, errors.event_types),
  h("div", { class: "field" }, h("label", { for: "sub-description" }, "Description"), description),
  h("button", { type: "submit", class: "primary" }, "Subscribe"));
  load();
  return h("div", {}, secret, list, h("h3", {}, "New subscription"), form);
}

// Deliveries are read a page at a time: a busy subscription has thousands.
export const DELIVERY_PAGE = 20;
let itemSeq = 0;

function subscriptionItem(sub, secret, reload) {
  const n = ++itemSeq;
  const deliveries = h("div", { class: "deliveries-box" });
  const panel = h("div", {});
  const path = `/v1/subscriptions/${encodeURIComponent(sub.id)}`;
  const failed = (err) => flash(`${err.message}${err.status ? ` (HTTP ${err.status})` : ""}`, "error");
  const patch = async (changes, done) => {
    try {
      await api("PATCH", path, { body: changes });
      flash(done);
      reload();
    } catch (err) {
      failed(err);
    }
  };
  const show = () => deliveryPages(deliveries, path);
  const toggle = h("button", { type: "button", class: "toggle", onclick: () => patch({ enabled: !sub.enabled }, sub.enabled ? "Subscription disabled: no further deliveries until enabled." : "Subscription enabled.") },
    sub.enabled ? "Disable" : "Enable");
  return h("li", { class: "subscription", dataset: { id: sub.id } },
    h("div", { class: "row spread" },
      h("div", {}, h("code", { class: "wrap" }, sub.url), " ", badge(sub.enabled ? "enabled" : "disabled"),
        !sub.enabled && sub.disabled_reason ? h("span", { class: "small muted" }, ` ${sub.disabled_reason}`) : null,
        h("div", { class: "small muted" }, sub.event_types.join(", "), sub.description ? ` — ${sub.description}` : "")),
      h("div", { class: "row" },
        h("button", { type: "button", onclick: show }, "Deliveries"),
        h("button", { type: "button", onclick: () => replace(panel, editForm(sub, n, path, panel, reload)) }, "Edit"),
        toggle,
        h("button", { type: "button", onclick: async () => {
          try {
            const out = await post(`${path}/secret/rotate`);
            replace(secret, secretBox("New subscription secret", out.secret));
          } catch (err) {
            failed(err);
          }
        } }, "Rotate secret"),
        h("button", { type: "button", class: "danger", onclick: () => replace(panel, confirmDelete(sub, path, panel, reload)) }, "Delete"))),
    panel,
    deliveries);
}

function editForm(sub, n, path, panel, reload) {
  const id = (f) => `sub-${n}-${f}`;
  const url = h("input", { id: id("url"), type: "url", value: sub.url, required: true });
  const types = h("input", { id: id("types"), value: sub.event_types.join(", ") });
  const description = h("input", { id: id("description"), value: sub.description || "" });
  const errors = {
    url: h("p", { class: "field-error", id: id("url-error"), role: "alert", hidden: true }),
    event_types: h("p", { class: "field-error", id: id("types-error"), role: "alert", hidden: true }),
    description: h("p", { class: "field-error", id: id("description-error"), role: "alert", hidden: true }),
  };
  const general = h("div", {});
  const form = h("form", { class: "form card edit-subscription", "aria-label": `Edit subscription ${sub.url}`, onsubmit: async (e) => {
    e.preventDefault();
    for (const el of Object.values(errors)) el.hidden = true;
    replace(general);
    try {
      await api("PATCH", path, { body: {
        url: url.value.trim(),
        event_types: types.value.split(",").map((t) => t.trim()).filter(Boolean),
        description: description.value.trim() || null,
      } });
      flash("Subscription saved.");
      reload();
    } catch (err) {
      let placed = false;
      for (const [field, text] of Object.entries(err.fields || {})) {
        const el = errors[field.split(".")[0]];
        if (el) { el.textContent = text; el.hidden = false; placed = true; }
      }
      if (!placed) replace(general, errorBox(err));
    }
  } },
  general,
  h("div", { class: "field" }, h("label", { for: id("url") }, "Endpoint URL"), url, errors.url),
  h("div", { class: "field" }, h("label", { for: id("types") }, "Event types (comma-separated)"), types, errors.event_types),
  h("div", { class: "field" }, h("label", { for: id("description") }, "Description"), description, errors.description),
  h("div", { class: "row" },
    h("button", { type: "submit", class: "primary" }, "Save"),
    h("button", { type: "button", onclick: () => replace(panel) }, "Cancel")));
  queueMicrotask(() => url.focus());
  return form;
}

function confirmDelete(sub, path, panel, reload) {
  const yes = h("button", { type: "button", class: "danger", onclick: async () => {
    yes.disabled = true;
    try {
      await api("DELETE", path);
      flash(`Deleted the subscription to ${sub.url}.`);
      reload();
    } catch (err) {
      yes.disabled = false;
      flash(`${err.message}${err.status ? ` (HTTP ${err.status})` : ""}`, "error");
    }
  } }, "Delete subscription");
  const no = h("button", { type: "button", onclick: () => replace(panel) }, "Cancel");
  queueMicrotask(() => no.focus());
  return h("div", { class: "confirm", role: "alertdialog", "aria-label": "Confirm delete" },
    h("p", {}, "Delete the subscription to ", h("code", { class: "wrap" }, sub.url), "? No further events are delivered to it: deliveries still retrying end, and its delivery history is no longer listed."),
    yes, no);
}

// Pages of DELIVERY_PAGE, newest first, "Load more" follows next_cursor; "Hide" folds them.
function deliveryPages(box, path) {
  const rows = h("tbody", {});
  const more = h("button", { type: "button", class: "more", hidden: true }, "Load more deliveries");
  const shown = h("span", { class: "muted small", role: "status" });
  let cursor = null;
  const row = (d) => h("tr", {},
    h("td", {}, h("code", {}, d.event_type)),
    h("td", {}, badge(d.status), d.last_error ? h("div", { class: "small" }, d.last_error) : null),
    h("td", { class: "num" }, String(d.attempt_count)),
    h("td", {}, timeEl(d.created_at, "UTC")),
    h("td", {}, d.attempts.length ? h("ol", { class: "attempt-list" }, d.attempts.map((a) => h("li", {},
      `${a.status_code ?? a.error?.kind ?? "—"} · ${a.duration_ms} ms`,
      a.error?.message ? h("div", { class: "small" }, a.error.message) : null,
      a.response_excerpt ? h("pre", { class: "excerpt" }, a.response_excerpt) : null))) : "—"),
    h("td", {}, h("button", { type: "button", onclick: async () => {
      try {
        await post(`${path}/deliveries/${encodeURIComponent(d.id)}/replay`);
        flash("Replay queued.");
        deliveryPages(box, path);
      } catch (err) {
        flash(err.message, "error");
      }
    } }, "Replay")));
  const next = async () => {
    more.disabled = true;
    try {
      const p = await get(`${path}/deliveries${query({ limit: DELIVERY_PAGE, cursor })}`);
      if (!cursor && !p.items.length) return replace(box, empty("No deliveries yet."));
      for (const d of p.items) rows.appendChild(row(d));
      labelCells(t);
      cursor = p.next_cursor;
      more.hidden = !cursor;
      shown.textContent = `${rows.children.length} shown${cursor ? ", more older" : ""}`;
    } catch (err) {
      replace(box, errorBox(err));
    } finally {
      more.disabled = false;
    }
  };
  more.addEventListener("click", next);
  const t = table("Deliveries", ["Event", "Status", "Attempts", "Created", "Attempt results", ""], [], { className: "deliveries" });
  t.querySelector("tbody").replaceWith(rows);
  replace(box, loading("deliveries"));
  const hide = h("button", { type: "button", class: "link", onclick: () => replace(box) }, "Hide");
  const head = h("div", { class: "row spread" }, h("h3", {}, "Deliveries"), hide);
  next().then(() => {
    if (!box.querySelector(".empty, .error-box")) replace(box, head, t, h("div", { class: "row" }, more, shown));
  });
}

function contacts() {
  const emails = h("textarea", { id: "alert-emails", rows: 2, placeholder: "ops@example.com" });
  const error = h("p", { class: "field-error", id: "alert-emails-error", role: "alert", hidden: true });
  get("/v1/alert-contacts").then((c) => { emails.value = c.emails.join("\n"); }, () => {});
  return h("form", { class: "form", onsubmit: async (e) => {
    e.preventDefault();
    error.hidden = true;
    try {
      const list = emails.value.split(/[\s,]+/).filter(Boolean);
      await api("PUT", "/v1/alert-contacts", { body: { emails: list } });
      flash("Alert contacts saved.");
    } catch (err) {
      error.textContent = Object.values(err.fields || {})[0] || err.message;
      error.hidden = false;
    }
  } },
  h("div", { class: "field" }, h("label", { for: "alert-emails" }, "Emails that receive alerts (one per line)"), emails, error),
  h("button", { type: "submit" }, "Save contacts"));
}
