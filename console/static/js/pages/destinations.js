// Destinations (DESIGN.md §7b "Flow control"): the tenant's limits per `host:port` (requests in
// flight, requests per second) and each one's live state: held until (a 429/503 Retry-After
// holds every run to it), the current rate (halved on a 429 without one, growing back) and the
// runs in flight. Set or change a limit, or delete it (the defaults apply again). Times in UTC:
// a destination serves schedules of any zone.
import { h, replace } from "../h.js";
import { api, get, query } from "../api.js";
import { timeEl } from "../time.js";
import { empty, errorBox, flash, labelCells, loading, table } from "../ui.js";

const PAGE = 100;
const IN_FLIGHT = [1, 100];
const PER_SECOND = [0.1, 1000];
const path = (d) => `/v1/destinations/${encodeURIComponent(d)}`;

function read(d) {
  return {
    name: d.destination,
    configured: d.configured !== false,
    maxInFlight: d.max_in_flight,
    perSecond: d.per_second ?? null,
    heldUntil: d.held_until ?? null,
    rate: d.current_rate ?? null,
    inFlight: d.in_flight ?? null,
  };
}

const number = (n) => (n === null || n === undefined ? h("span", { class: "muted" }, "—") : String(n));

export async function destinationsPage(signal) {
  const list = h("div", { id: "destinations" }, loading("destinations"));
  const reload = () => show(list, signal, reload);
  reload();
  return h("section", {},
    h("h1", {}, "Destinations"),
    h("p", { class: "muted" }, "Limits per host:port of your targets, held by every worker together. Without one, a destination gets the defaults (10 requests in flight, no rate limit); a 429 or 503 with Retry-After holds all your runs to it until then."),
    h("div", { class: "card" }, h("h2", {}, "Set a limit"), limitForm(null, reload)),
    h("div", { class: "card" }, h("h2", {}, "Your destinations"), list));
}

async function show(box, signal, reload) {
  const rows = [];
  let cursor = null;
  try {
    for (let i = 0; i < 100; i++) { // at most 10,000 destinations
      const p = await get(`/v1/destinations/${query({ limit: PAGE, cursor })}`, { signal });
      rows.push(...p.items);
      cursor = p.next_cursor;
      if (!cursor) break;
    }
  } catch (err) {
    if (err.name !== "AbortError") replace(box, errorBox(err));
    return;
  }
  if (!rows.length) return replace(box, empty("No destination has a limit or a live state yet."));
  const t = table("Destinations", ["Destination", "Max in flight", "Rate limit", "Held until", "Current rate", "In flight", ""],
    rows.map((d) => row(read(d), reload)), { className: "destinations" });
  labelCells(t);
  replace(box, t);
}

function row(d, reload) {
  const editor = h("div", { hidden: true }, limitForm(d, reload));
  const confirmBox = h("div", { class: "confirm", hidden: true, role: "alertdialog", "aria-label": `Confirm delete of ${d.name}` },
    h("p", {}, `Delete the limit of ${d.name}? The defaults apply again.`),
    h("button", { type: "button", class: "danger", onclick: async (e) => {
      e.currentTarget.disabled = true;
      try {
        await api("DELETE", path(d.name));
        flash(`Deleted the limit of ${d.name}.`);
        reload();
      } catch (err) {
        flash(`${err.message}${err.status ? ` (HTTP ${err.status})` : ""}`, "error");
      }
    } }, "Yes, delete"),
    h("button", { type: "button", onclick: () => { confirmBox.hidden = true; } }, "Cancel"));
  return h("tr", { dataset: { destination: d.name } },
    h("td", {}, h("code", {}, d.name), d.configured ? null : h("div", { class: "small muted" }, "defaults (no limit set)")),
    h("td", { class: "num" }, number(d.maxInFlight)),
    h("td", { class: "num" }, d.perSecond === null ? h("span", { class: "muted" }, "none") : `${d.perSecond}/s`),
    h("td", { class: "held" }, d.heldUntil && Date.parse(d.heldUntil) > Date.now() ? timeEl(d.heldUntil, "UTC") : h("span", { class: "muted" }, "not held")),
    h("td", { class: "num" }, d.rate === null ? h("span", { class: "muted" }, "—") : `${Number(d.rate).toFixed(2)}/s`),
    h("td", { class: "num" }, number(d.inFlight)),
    h("td", {},
      h("div", { class: "row" },
        h("button", { type: "button", onclick: () => { editor.hidden = !editor.hidden; } }, "Edit"),
        d.configured ? h("button", { type: "button", class: "danger", onclick: () => { confirmBox.hidden = false; confirmBox.querySelector("button").focus(); } }, "Delete…") : null),
      editor, confirmBox));
}

// Create (d null: the destination is typed) or change a limit with PUT.
function limitForm(d, reload) {
  const id = d ? `dest-${d.name.replace(/[^a-z0-9]/gi, "-")}` : "dest-new";
  const name = h("input", { id: `${id}-name`, value: d ? d.name : "", placeholder: "api.example.com:443", required: true, disabled: Boolean(d), autocomplete: "off", spellcheck: "false" });
  const inFlight = h("input", { id: `${id}-in-flight`, type: "number", min: IN_FLIGHT[0], max: IN_FLIGHT[1], step: 1, value: d ? d.maxInFlight : 10 });
  const perSecond = h("input", { id: `${id}-per-second`, type: "number", min: PER_SECOND[0], max: PER_SECOND[1], step: "any", value: d && d.perSecond !== null ? d.perSecond : "", placeholder: "no limit" });
  const err = h("div", {});
  const submit = h("button", { type: "submit", class: "primary" }, d ? "Save" : "Set limit");
  return h("form", { class: "filters destination-form", novalidate: true, onsubmit: async (e) => {
    e.preventDefault();
    replace(err);
    const target = name.value.trim();
    if (!target) return replace(err, errorBox({ message: "Enter a host:port." }));
    submit.disabled = true;
    try {
      const body = { max_in_flight: Number(inFlight.value), per_second: perSecond.value === "" ? null : Number(perSecond.value) };
      await api("PUT", path(target), { body });
      flash(`Saved the limit of ${target}.`);
      if (!d) name.value = "";
      reload();
    } catch (e2) {
      replace(err, errorBox(e2));
    } finally {
      submit.disabled = false;
    }
  } },
  h("div", { class: "field" }, h("label", { for: name.id }, "Destination (host:port)"), name),
  h("div", { class: "field" }, h("label", { for: inFlight.id }, "Max in flight"), inFlight,
    h("p", { class: "hint" }, `${IN_FLIGHT[0]}–${IN_FLIGHT[1]}`)),
  h("div", { class: "field" }, h("label", { for: perSecond.id }, "Requests per second"), perSecond,
    h("p", { class: "hint" }, `${PER_SECOND[0]}–${PER_SECOND[1]}; empty: no limit`)),
  h("div", { class: "field" }, submit),
  err);
}
