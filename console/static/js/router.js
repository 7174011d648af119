// The current `#/path?query` route.
export function route() {
  const raw = location.hash.replace(/^#/, "") || "/schedules";
  const [path, search] = raw.split("?");
  return { path, params: new URLSearchParams(search || "") };
}
