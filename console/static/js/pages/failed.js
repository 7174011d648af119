// Failed runs across all schedules (the dead letters), newest first, with replay.
import { h, replace } from "../h.js";
import { get, post, query } from "../api.js";
import { empty, errorBox, labelCells, loading, table } from "../ui.js";
import { runRow } from "./schedule.js";

export async function failedPage() {
  const rows = h("tbody", {});
  const box = h("div", {}, loading("failed runs"));
  const more = h("button", { type: "button", hidden: true }, "Load more");
  const names = new Map();
  let cursor = null;
  const name = async (id) => {
    if (!names.has(id)) names.set(id, get(`/v1/schedules/${encodeURIComponent(id)}`).then((s) => s.name, () => id));
    return names.get(id);
  };
  const next = async () => {
    try {
      const p = await get(`/v1/schedules/-/runs${query({ status: "failed", limit: 50, cursor })}`);
      for (const r of p.items) {
        const cell = h("td", {}, h("a", { href: `#/schedules/${encodeURIComponent(r.schedule_id)}` }, r.schedule_id));
        name(r.schedule_id).then((n) => { cell.firstChild.textContent = n; });
        const status = h("td", {});
        const replay = h("button", { type: "button", onclick: async () => {
          replay.disabled = true;
          try {
            const run = await post(`/v1/schedules/${encodeURIComponent(r.schedule_id)}/runs/${encodeURIComponent(r.id)}/replay`);
            replace(status, "Replayed: ", h("a", { href: `#/schedules/${encodeURIComponent(r.schedule_id)}/runs/${encodeURIComponent(run.id)}` }, "new run"));
          } catch (err) {
            replace(status, errorBox(err));
            replay.disabled = false;
          }
        } }, "Replay");
        rows.appendChild(runRow(r, "UTC", [cell, h("td", {}, replay), status]));
      }
      labelCells(box);
      cursor = p.next_cursor;
      more.hidden = !cursor;
      if (!rows.children.length) replace(box, empty("No failed runs. Runs that used up their attempts appear here."));
    } catch (err) {
      replace(box, errorBox(err));
    }
  };
  more.addEventListener("click", next);
  const t = table("Failed runs", ["Scheduled for (UTC)", "Trigger", "Status", "Attempts", "Finished", "Schedule", "", ""], []);
  t.querySelector("tbody").replaceWith(rows);
  replace(box, t, more);
  next();
  return h("section", {}, h("h1", {}, "Failed runs"), h("p", { class: "muted" }, "Runs of every schedule that failed after their last attempt."), box);
}
