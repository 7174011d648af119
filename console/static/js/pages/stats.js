// Charts from /runs/stats: the 7-day success bar (UTC days) and the run timeline (buckets cut
// in the schedule's zone by the API's `tz`: a DST day is 23 or 25 hours).
import { h } from "../h.js";
import { shortDay, shortHour, zoneAbbr } from "../time.js";

const ORDER = ["succeeded", "failed", "retrying", "in_progress", "pending", "skipped"];

function describe(counts) {
  const parts = ORDER.filter((k) => counts[k]).map((k) => `${counts[k]} ${k.replace("_", " ")}`);
  return parts.length ? parts.join(", ") : "no runs";
}

function weekBar(st) {
  const cells = st.buckets.map((b) => {
    const ok = b.counts.succeeded || 0;
    const bad = b.counts.failed || 0;
    const kind = bad && ok ? "mixed" : bad ? "failed" : ok ? "succeeded" : "none";
    return h("span", { class: `day day-${kind}`, title: `${shortDay(b.start)} (UTC): ${describe(b.counts)}` });
  });
  const ok = st.totals.succeeded || 0;
  const done = ok + (st.totals.failed || 0);
  const label = done ? `${Math.round((100 * ok) / done)}% succeeded` : "no finished runs";
  return h("span", { class: "week-bar", role: "img", "aria-label": `Last 7 days: ${label}` }, cells, h("span", { class: "small muted" }, ` ${label}`));
}

function timeline(st) {
  // The zone the API cut the buckets in (an older API answers UTC buckets and no `timezone`).
  const tz = st.timezone || "UTC";
  const max = Math.max(1, ...st.buckets.map((b) => ORDER.reduce((n, k) => n + (b.counts[k] || 0), 0)));
  const label = (iso) => (st.bucket === "hour" ? shortHour : shortDay)(iso, tz);
  const abbr = (iso) => zoneAbbr(new Date(iso), tz);
  const bars = st.buckets.map((b, i) => {
    const segs = ORDER.filter((k) => b.counts[k]).map((k) => {
      const seg = h("span", { class: `seg seg-${k}` });
      seg.style.height = `${(100 * b.counts[k]) / max}%`; // CSSOM, allowed by the CSP
      return seg;
    });
    const every = st.buckets.length > 12 ? Math.ceil(st.buckets.length / 8) : 1;
    return h("div", { class: "bucket", title: `${label(b.start)} ${abbr(b.start)}: ${describe(b.counts)}` },
      h("div", { class: "stack" }, segs),
      h("span", { class: "tick" }, i % every === 0 ? label(b.start) : ""));
  });
  const legend = h("ul", { class: "legend" }, ORDER.filter((k) => st.totals[k]).map((k) =>
    h("li", {}, h("span", { class: `swatch seg-${k}` }), `${k.replace("_", " ")}: ${st.totals[k]}`)));
  return h("figure", { class: "timeline" },
    h("div", { class: "bars", role: "img", "aria-label": `Runs by ${st.bucket} (${tz}): ${describe(st.totals)}` }, bars),
    h("figcaption", {}, legend.children.length ? legend : h("span", { class: "muted" }, "No runs in this window."),
      h("span", { class: "small muted" }, `${st.bucket === "hour" ? "Hours" : "Days"} in ${tz} (${abbr(st.to)}).`)));
}

export const stats = { weekBar, timeline };
