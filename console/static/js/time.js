// Times in the schedule's zone with its abbreviation (EST/EDT, CET…), the UTC instant on hover
// (the `title`). One rule for every page: no raw ISO string in the UI.
import { h } from "./h.js";

const formats = new Map();

// en-US is the locale whose Intl data names the common zones (EST/EDT, PST…); en-GB says
// "GMT-5" for New York.
function formatter(zone, opts, key) {
  const k = `${key}|${zone}`;
  if (!formats.has(k)) {
    let f;
    try {
      f = new Intl.DateTimeFormat("en-US", { timeZone: zone, hourCycle: "h23", ...opts });
    } catch {
      f = new Intl.DateTimeFormat("en-US", { timeZone: "UTC", hourCycle: "h23", ...opts });
    }
    formats.set(k, f);
  }
  return formats.get(k);
}

const FULL = { year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" };

function parts(date, zone, opts, key) {
  const out = {};
  for (const p of formatter(zone, opts, key).formatToParts(date)) out[p.type] = p.value;
  return out;
}

// The zone's abbreviation at that instant, or its offset as UTC±hh:mm when Intl has no name for
// it (it answers "GMT+3" then: Africa/Addis_Ababa).
export function zoneAbbr(date, zone) {
  const name = parts(date, zone, { timeZoneName: "short" }, "abbr").timeZoneName || "UTC";
  if (name === "UTC" || name === "GMT") return "UTC";
  if (!/^GMT[+-]/.test(name)) return name;
  const off = parts(date, zone, { timeZoneName: "longOffset" }, "offset").timeZoneName || "GMT";
  const m = /^GMT([+-])(\d{2}):?(\d{2})?$/.exec(off);
  return m ? `UTC${m[1]}${m[2]}:${m[3] || "00"}` : "UTC";
}

export function localText(iso, zone) {
  if (!iso) return "—";
  const d = new Date(iso);
  const p = parts(d, zone || "UTC", FULL, "full");
  return `${p.month} ${p.day}, ${p.year}, ${p.hour}:${p.minute}:${p.second} ${zoneAbbr(d, zone || "UTC")}`;
}

export function utcText(iso) {
  return new Date(iso).toISOString().replace(".000Z", "Z");
}

export function timeEl(iso, zone) {
  if (!iso) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: utcText(iso), title: `UTC ${utcText(iso)}` }, localText(iso, zone));
}

// Axis labels of the run timeline, in the zone the buckets were cut in.
export function shortDay(iso, zone = "UTC") {
  const p = parts(new Date(iso), zone, { month: "short", day: "2-digit" }, "day");
  return `${p.month} ${p.day}`;
}

export function shortHour(iso, zone = "UTC") {
  const p = parts(new Date(iso), zone, { hour: "2-digit", minute: "2-digit" }, "hour");
  return `${p.hour}:${p.minute}`;
}

// Wall time in a zone <-> the instant: a datetime-local input's value ("2026-03-08T02:30") read
// in the schedule's zone, as RFC 3339 with that zone's offset. A wall time DST skips resolves
// forwards (as `shift` does); a repeated one takes its first pass.
export function offsetMinutes(date, zone) {
  const p = parts(date, zone, { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" }, "num");
  const asUtc = Date.UTC(+p.year, +p.month - 1, +p.day, +p.hour % 24, +p.minute, +p.second);
  return Math.round((asUtc - Math.floor(date.getTime() / 1000) * 1000) / 60000);
}

export function wallToInstant(wall, zone) {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?$/.exec(wall || "");
  if (!m) return null;
  const naive = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +(m[6] || 0));
  let off;
  try {
    // The offsets a day either side hold across any one transition: the earlier one if it
    // fits (the first pass of a repeated hour), else the later one; neither fits in a skipped
    // hour, which lands after the gap (the earlier offset).
    const DAY = 86_400_000;
    const before = offsetMinutes(new Date(naive - DAY), zone);
    const after = offsetMinutes(new Date(naive + DAY), zone);
    const fits = (o) => offsetMinutes(new Date(naive - o * 60000), zone) === o;
    off = fits(before) || !fits(after) ? before : after;
  } catch {
    return null;
  }
  const sign = off < 0 ? "-" : "+";
  const a = Math.abs(off);
  const pad = (n) => String(n).padStart(2, "0");
  return `${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6] || "00"}${sign}${pad(Math.floor(a / 60))}:${pad(a % 60)}`;
}

// The instant as a datetime-local value in the zone (an edit shows the stored start/end there).
export function instantToWall(iso, zone) {
  if (!iso) return "";
  const p = parts(new Date(iso), zone, { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" }, "num");
  const s = p.second === "00" ? "" : `:${p.second}`;
  return `${p.year}-${p.month}-${p.day}T${p.hour}:${p.minute}${s}`;
}
