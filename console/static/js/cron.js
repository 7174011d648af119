// A cron expression in words for the common shapes; null when the expression says it best.

const DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const MACROS = {
  "@yearly": "every year on 1 Jan at 00:00", "@annually": "every year on 1 Jan at 00:00",
  "@monthly": "on day 1 of every month at 00:00", "@weekly": "every Sunday at 00:00",
  "@daily": "every day at 00:00", "@midnight": "every day at 00:00", "@hourly": "every hour",
};
const num = /^\d+$/;

function pad(n) {
  return String(n).padStart(2, "0");
}

function days(field) {
  if (field === "*") return null;
  const parts = field.split(",").map((p) => {
    const range = /^(\d)-(\d)$/.exec(p);
    if (range) return `${DAYS[+range[1]]}–${DAYS[+range[2]]}`;
    return num.test(p) && +p <= 7 ? DAYS[+p] : null;
  });
  return parts.includes(null) ? undefined : parts.join(", ");
}

export function cronInWords(cron) {
  if (!cron) return null;
  const expr = cron.trim();
  if (expr in MACROS) return MACROS[expr];
  const f = expr.split(/\s+/);
  if (f.length !== 5) return null;
  const [min, hour, dom, mon, dow] = f;
  if (mon !== "*") return null;
  const step = /^\*\/(\d+)$/.exec(min);
  if (hour === "*" && dom === "*" && dow === "*") {
    if (min === "*") return "every minute";
    if (step) return `every ${step[1]} minutes`;
    if (num.test(min)) return `every hour at minute ${+min}`;
    return null;
  }
  if (!num.test(min) || !num.test(hour)) return null;
  const at = `${pad(hour)}:${pad(min)}`;
  const d = days(dow);
  if (d === undefined) return null;
  if (dom === "*") return d ? `every ${d} at ${at}` : `every day at ${at}`;
  if (num.test(dom) && d === null) return `on day ${+dom} of every month at ${at}`;
  return null;
}
