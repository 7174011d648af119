// The console's router: `#/path` fragments, one page module per route.
import { h, replace } from "./h.js";
import { route } from "./router.js";
import { flash, handoff } from "./ui.js";
import { get, hasToken, setToken, takeRefusal, takeTokenFromFragment } from "./api.js";
import { schedulesPage } from "./pages/schedules.js";
import { schedulePage } from "./pages/schedule.js";
import { runPage } from "./pages/run.js";
import { versionPage } from "./pages/history.js";
import { ledgerPage } from "./pages/ledger.js";
import { destinationsPage } from "./pages/destinations.js";
import { formPage } from "./pages/form.js";
import { failedPage } from "./pages/failed.js";
import { notificationsPage } from "./pages/notifications.js";

const routes = [
  [/^\/schedules\/?$/, () => schedulesPage()],
  [/^\/schedules\/new$/, () => formPage(null)],
  [/^\/schedules\/([^/]+)\/edit$/, (m) => formPage(m[1])],
  [/^\/schedules\/([^/]+)\/runs\/([^/]+)$/, (m) => runPage(m[1], m[2])],
  [/^\/schedules\/([^/]+)\/versions\/(\d+)$/, (m) => versionPage(m[1], m[2])],
  [/^\/schedules\/([^/]+)\/ledger$/, (m, signal) => ledgerPage(m[1], signal)],
  [/^\/schedules\/([^/]+)$/, (m) => schedulePage(m[1])],
  [/^\/failed$/, () => failedPage()],
  [/^\/destinations$/, (m, signal) => destinationsPage(signal)],
  [/^\/notifications$/, () => notificationsPage()],
  [/^\/sign-in$/, () => signInPage()],
];

let current = null;

async function render() {
  const main = document.getElementById("main");
  const { path } = route();
  if (current && current.abort) current.abort();
  current = new AbortController();
  document.getElementById("flash").replaceChildren();
  document.getElementById("sign-out").hidden = !hasToken();
  for (const a of document.querySelectorAll("nav a")) {
    a.toggleAttribute("aria-current", path.startsWith(a.getAttribute("href").slice(1)));
  }
  for (const [re, page] of routes) {
    const m = re.exec(path);
    if (m) {
      replace(main, await page(m, current.signal));
      if (handoff.flash) {
        flash(handoff.flash);
        delete handoff.flash;
      }
      main.focus({ preventScroll: true });
      refreshUnread();
      return;
    }
  }
  replace(main, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/schedules" }, "Back to schedules")));
}

// A typed token is tried against the API before leaving the page: a refused one stays here with
// the API's reason (and is already forgotten: api.js), as does a link's token refused later.
function signInPage() {
  const refused = h("div", { id: "sign-in-error" });
  const showRefusal = () => {
    const reason = takeRefusal();
    replace(refused, reason
      ? h("div", { class: "error-box", role: "alert" }, `That token was refused: ${reason}. Paste a valid one.`)
      : null);
    if (reason) input.setAttribute("aria-describedby", "sign-in-error");
    else input.removeAttribute("aria-describedby");
    document.getElementById("sign-out").hidden = !hasToken();
  };
  const input = h("input", { id: "token", type: "password", autocomplete: "off", required: true });
  const submit = h("button", { type: "submit", class: "primary" }, "Sign in");
  const form = h("form", {
    class: "card form",
    onsubmit: async (e) => {
      e.preventDefault();
      setToken(input.value.trim());
      submit.disabled = true;
      try {
        await get("/v1/schedules/?limit=1");
      } catch (err) {
        if (err.status === 401) {
          showRefusal();
          input.value = "";
          input.focus();
          return;
        }
        // Anything else (a missing scope, an outage) is the schedules page's to show.
      } finally {
        submit.disabled = false;
      }
      location.hash = "#/schedules";
    },
  },
  h("label", { for: "token" }, "Bearer token"),
  input,
  h("p", { class: "hint" }, "Kept for this tab only (sessionStorage). `make run` prints a link that signs in for you."),
  submit);
  showRefusal();
  return h("section", {}, h("h1", {}, "Sign in"), refused, form);
}

// The header's unread count: read on every route change, when a page says it changed (a
// notification marked read), when the tab comes back into view, and every UNREAD_POLL_MS while
// it is visible. One read at a time: a call while one is out asks for one more after it.
const UNREAD_POLL_MS = 30_000;
const unread = { inFlight: null, again: false };

function refreshUnread() {
  if (unread.inFlight) {
    unread.again = true;
    return unread.inFlight;
  }
  unread.inFlight = readUnread().finally(() => {
    unread.inFlight = null;
    if (unread.again) {
      unread.again = false;
      refreshUnread();
    }
  });
  return unread.inFlight;
}

async function readUnread() {
  const el = document.getElementById("unread");
  // Not while signed out (a gateway that signs users in sends no token here, so not hasToken).
  if (route().path === "/sign-in") {
    el.hidden = true;
    return;
  }
  try {
    const page = await get("/v1/notifications/?limit=100");
    const n = page.items.filter((i) => !i.read).length;
    el.textContent = n ? `${n}${page.next_cursor && n === page.items.length ? "+" : ""} unread` : "";
    el.hidden = n === 0;
  } catch {
    el.hidden = true;
  }
}

window.addEventListener("console:unread-changed", refreshUnread);
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible") refreshUnread();
});
setInterval(() => {
  if (document.visibilityState === "visible") refreshUnread();
}, UNREAD_POLL_MS);

window.addEventListener("console:unauthorized", () => {
  document.getElementById("sign-out").hidden = !hasToken();
  if (route().path !== "/sign-in") location.hash = "#/sign-in";
});
window.addEventListener("hashchange", render);
document.getElementById("sign-out").addEventListener("click", () => {
  setToken(null);
  location.hash = "#/sign-in";
});
takeTokenFromFragment();
render();
