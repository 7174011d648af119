// Notifications: the in-app inbox (unread first to the eye), webhook subscriptions (create,
// rotate, deliveries with attempts, replay) and the alert contacts.
import { h, replace } from "../h.js";
import { api, get, post, query } from "../api.js";
import { timeEl } from "../time.js";
import { badge, empty, errorBox, flash, loading, secretBox, table } from "../ui.js";

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
      replace(list, h("ul", { class: "subscriptions" }, p.items.map((sub) => subscriptionItem(sub, secret))));
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

function subscriptionItem(sub, secret) {
  const deliveries = h("div", {});
  const path = `/v1/subscriptions/${encodeURIComponent(sub.id)}`;
  const show = async () => {
    replace(deliveries, loading("deliveries"));
    try {
      const p = await get(`${path}/deliveries${query({ limit: 50 })}`);
      if (!p.items.length) return replace(deliveries, empty("No deliveries yet."));
      replace(deliveries, table("Deliveries", ["Event", "Status", "Attempts", "Created", "Attempt results", ""], p.items.map((d) => {
        return h("tr", {},
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
              show();
            } catch (err) {
              flash(err.message, "error");
            }
          } }, "Replay")));
      }), { className: "deliveries" }));
    } catch (err) {
      replace(deliveries, errorBox(err));
    }
  };
  return h("li", { class: "subscription" },
    h("div", { class: "row spread" },
      h("div", {}, h("code", { class: "wrap" }, sub.url), " ", badge(sub.enabled ? "enabled" : "disabled"),
        h("div", { class: "small muted" }, sub.event_types.join(", "), sub.description ? ` — ${sub.description}` : "")),
      h("div", { class: "row" },
        h("button", { type: "button", onclick: show }, "Deliveries"),
        h("button", { type: "button", onclick: async () => {
          try {
            const out = await post(`${path}/secret/rotate`);
            replace(secret, secretBox("New subscription secret", out.secret));
          } catch (err) {
            flash(err.message, "error");
          }
        } }, "Rotate secret"))),
    deliveries);
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
