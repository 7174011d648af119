// Same-origin calls to the public /v1 APIs with the tab's bearer token.
//
// Sign-in: a link whose fragment is `#token=...` (the fragment never reaches a server) is read
// once, kept in sessionStorage (this tab only; never localStorage) and removed from the address
// bar. Without a token no Authorization header is sent: a gateway that signs users in itself
// adds it to every request.
//
// A token the API refuses (401) is forgotten at once, so the tab is signed out, and the API's
// reason (its problem detail: malformed, bad signature, expired, ...) waits in `refusal` for the
// sign-in page to show.

const TOKEN_KEY = "console.token";

export function takeTokenFromFragment() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!match) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
  history.replaceState(null, "", location.pathname + location.search + "#/schedules");
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function hasToken() {
  return sessionStorage.getItem(TOKEN_KEY) !== null;
}

const refusal = { reason: null };

// Why the API refused the last token this tab sent, once; null when none was refused since.
export function takeRefusal() {
  const reason = refusal.reason;
  refusal.reason = null;
  return reason;
}

export class ApiError extends Error {
  constructor(status, problem) {
    super(problemMessage(status, problem));
    this.status = status;
    this.problem = problem || {};
    this.fields = fieldErrors(this.problem);
  }
}

// Both problem shapes: `errors: [{field, detail|message}]` (servicekit) and
// `invalid_params: [{name, reason}]`; a lone `field` names the detail's field.
export function fieldErrors(problem) {
  const out = {};
  for (const e of problem.errors || []) {
    const field = e.field || e.name;
    if (field && !(field in out)) out[field] = e.detail || e.message || e.reason || "invalid";
  }
  for (const e of problem.invalid_params || []) {
    if (e.name && !(e.name in out)) out[e.name] = e.reason || "invalid";
  }
  if (problem.field && !(problem.field in out)) out[problem.field] = problem.detail || "invalid";
  return out;
}

function problemMessage(status, problem) {
  if (problem && (problem.detail || problem.title)) return String(problem.detail || problem.title);
  if (status === 0) return "The API could not be reached.";
  return `The API answered ${status}.`;
}

export async function api(method, path, { body, headers = {}, signal } = {}) {
  const h = { Accept: "application/json", ...headers };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) h.Authorization = `Bearer ${token}`;
  if (body !== undefined) h["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: h,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      credentials: "same-origin",
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, null);
  }
  if (response.status === 204) return { data: null, response };
  let data = null;
  const type = response.headers.get("Content-Type") || "";
  if (type.includes("json")) data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = new ApiError(response.status, data);
    if (response.status === 401) {
      // Only the token this request carried (a newer one may have been entered meanwhile).
      if (token && sessionStorage.getItem(TOKEN_KEY) === token) {
        setToken(null);
        refusal.reason = (data && typeof data.detail === "string" && data.detail) || "the API answered 401";
      }
      window.dispatchEvent(new CustomEvent("console:unauthorized"));
    }
    throw error;
  }
  return { data, response };
}

export const get = (path, opts) => api("GET", path, opts).then((r) => r.data);
export const post = (path, body, opts) => api("POST", path, { ...opts, body }).then((r) => r.data);

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    // An array repeats the parameter (`?label=a&label=b`).
    if (Array.isArray(v)) for (const one of v) q.append(k, one);
    else if (v !== null && v !== undefined && v !== "") q.set(k, v);
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}
