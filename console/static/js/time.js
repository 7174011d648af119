// Times in the schedule's zone, the UTC instant on hover (the `title`).
import { h } from "./h.js";

const formats = new Map();

function formatter(zone) {
  if (!formats.has(zone)) {
    let f;
    try {
      f = new Intl.DateTimeFormat("en-GB", {
        timeZone: zone, year: "numeric", month: "short", day: "2-digit",
        hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
      });
    } catch {
      f = formatter("UTC");
    }
    formats.set(zone, f);
  }
  return formats.get(zone);
}

export function localText(iso, zone) {
  if (!iso) return "—";
  return formatter(zone || "UTC").format(new Date(iso));
}

export function utcText(iso) {
  return new Date(iso).toISOString().replace(".000Z", "Z");
}

export function timeEl(iso, zone) {
  if (!iso) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: iso, title: `UTC ${utcText(iso)}` }, localText(iso, zone));
}

export function shortDay(iso) {
  return new Intl.DateTimeFormat("en-GB", { timeZone: "UTC", month: "short", day: "2-digit" }).format(new Date(iso));
}

export function shortHour(iso) {
  return new Intl.DateTimeFormat("en-GB", { timeZone: "UTC", hour: "2-digit", minute: "2-digit" }).format(new Date(iso));
}
