"""The hostile-bytes battery: NUL, other control characters, lone surrogates, invalid UTF-8, NaN,
Infinity, huge numbers and non-ASCII into every path parameter, query parameter, body field and
header of every route of both services (the routes come from their /openapi.json), over real
HTTP against PostgreSQL.

0 server errors; every refusal is problem+json; NUL is refused wherever it is put (PostgreSQL
cannot store it); and afterwards nothing stored holds a NUL or a NaN.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest

from authclient import mint_token
from tests.api_contract.conftest import SCOPES, Served, bearer
from tests.scheduler.conftest import HS256_KEY

# Percent-encoded path and query values: controls, C1, invalid UTF-8 (a lone byte, an encoded
# surrogate), non-ASCII, overlong.
HOSTILE_URL_VALUES = [
    "%00",
    "a%00b",
    "%01",
    "%1F",
    "%09",
    "%0A",
    "%7F",
    "%C2%80",
    "%C2%9F",
    "%FF",
    "%ED%A0%80",
    "%C3%A9",
    "%E2%80%AE",
    "NaN",
    "-Infinity",
    "1e999",
    "99999999999999999999999999999",
    "-1",
    "0.5",
    "x" * 3000,
]
NUL_URL_VALUES = {"%00", "a%00b"}
_LARGE = "__LARGE_FLOAT__"  # replaced by a literal that parses to inf
# Body values: json.dumps writes NaN and Infinity as the bare tokens Python's json reads back.
HOSTILE_BODY_VALUES: list[Any] = [
    "\x00",
    "a\x00b",
    "\x01",
    "\x1b[31m",
    "\t",
    "\n",
    "\x7f",
    "\x85",
    "\u2028",
    "\ud800",
    "é",
    "😀",
    math.nan,
    math.inf,
    -math.inf,
    _LARGE,
    10**400,
    -(2**63),
    2**64,
    True,
    None,
    [],
    {},
    "x" * 20_000,
]


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _encode(body: Any) -> bytes:
    text = json.dumps(body)  # allow_nan: NaN / Infinity go out as the bare tokens
    return text.replace(json.dumps(_LARGE), "1e400").encode("utf-8", "surrogatepass")


def _mutations(body: Any) -> Iterator[tuple[str, Any]]:
    """(where, body) with one leaf replaced by one hostile value, or one hostile key added."""

    def walk(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
        yield path, node
        if isinstance(node, dict):
            for key, child in node.items():
                yield from walk(child, (*path, key))
        elif isinstance(node, list):
            for i, child in enumerate(node):
                yield from walk(child, (*path, i))

    def replaced(node: Any, path: tuple[Any, ...], value: Any) -> Any:
        if not path:
            return value
        copy = dict(node) if isinstance(node, dict) else list(node)
        copy[path[0]] = replaced(node[path[0]], path[1:], value)
        return copy

    for path, node in list(walk(body, ())):
        where = ".".join(map(str, path)) or "body"
        if path:
            for value in HOSTILE_BODY_VALUES:
                yield f"{where}={value!r:.20}", replaced(body, path, value)
        if isinstance(node, dict):
            for key in ("\x00", "X-\x01", "é"):
                yield f"{where}[{key!r}]", replaced(body, path, {**node, key: "v"})
        if isinstance(node, list):
            for value in ("\x00", math.nan):
                yield f"{where}[+{value!r}]", replaced(body, path, [*node, value])


@dataclass
class Case:
    method: str
    url: str
    headers: dict[str, str]
    content: bytes | None = None
    must_refuse: bool = False  # a NUL went in: only a 4xx is right

    def label(self) -> str:
        return f"{self.method} {self.url[:120]} {self.content[:120] if self.content else ''!r}"


def _fill(template: str, ids: dict[str, str], override: tuple[str, str] | None = None) -> str:
    path = template
    if override is not None:
        path = path.replace("{" + override[0] + "}", override[1])
    for name, value in ids.items():
        path = path.replace("{" + name + "}", quote(value, safe=""))
    return path


def _cases(served: Served, ids: dict[str, str], bodies: dict[tuple[str, str], Any]) -> list[Case]:
    auth = bearer()
    json_headers = {**auth, "Content-Type": "application/json"}
    cases: list[Case] = []
    paths: dict[str, dict[str, Any]] = served.openapi["paths"]  # type: ignore[assignment]
    for template, operations in paths.items():
        for method, operation in operations.items():
            method = method.upper()
            params = operation.get("parameters", [])
            base = served.base_url + _fill(template, ids)
            for param in params:
                name = param["name"]
                for value in HOSTILE_URL_VALUES:
                    refuse = value in NUL_URL_VALUES
                    if param["in"] == "path":
                        url = served.base_url + _fill(template, ids, (name, value))
                        cases.append(Case(method, url, auth, must_refuse=refuse))
                    elif param["in"] == "query":
                        cases.append(
                            Case(method, f"{base}?{name}={value}", auth, must_refuse=refuse)
                        )
                    elif param["in"] == "header":
                        raw = value.encode()
                        cases.append(Case(method, base, {**auth, name: raw.decode("latin-1")}))
            body = bodies.get((method, template))
            if "requestBody" in operation:
                body = body if body is not None else {}
                for _, mutated in _mutations(body):
                    cases.append(
                        Case(method, base, json_headers, _encode(mutated), _has_nul(mutated))
                    )
                for raw in (b'{"a": NaN}', b"[Infinity]", b"-Infinity", b"1e400", b"\xff\xfe"):
                    cases.append(Case(method, base, json_headers, raw))
            if operation.get("security"):
                # A token whose tenant_id holds NUL is a 401, never a 500.
                nul_tenant = mint_token(HS256_KEY, tenant_id="t\x00", scopes=SCOPES)
                token_header = {"Authorization": f"Bearer {nul_tenant}"}
                cases.append(Case(method, base, token_header, must_refuse=True))
    return cases


def _run(cases: list[Case]) -> Counter[int]:
    statuses: Counter[int] = Counter()
    bad: list[str] = []
    with httpx.Client(timeout=15) as client:
        for case in cases:
            try:
                r = client.request(
                    case.method, case.url, headers=case.headers, content=case.content
                )
            except httpx.HTTPError as exc:  # a dropped connection is a server error too
                bad.append(f"{type(exc).__name__}: {case.label()}")
                continue
            statuses[r.status_code] += 1
            if r.status_code >= 500:
                bad.append(f"{r.status_code}: {case.label()} -> {r.text[:200]}")
            elif r.status_code >= 400:
                if not r.headers.get("content-type", "").startswith("application/problem+json"):
                    bad.append(f"{r.status_code} not problem+json: {case.label()}")
            elif case.must_refuse:
                bad.append(f"{r.status_code} accepted a NUL: {case.label()}")
    assert not bad, f"{len(bad)} of {len(cases)}:\n" + "\n".join(bad[:40])
    return statuses


def _assert_clean(client: httpx.Client, url: str) -> None:
    """What the service stored and lists back holds no NUL and no NaN."""
    r = client.get(url, headers=bearer())
    assert r.status_code == 200, r.text
    for token in ("\\u0000", "NaN", "Infinity"):
        assert token not in r.text, (url, r.text[:500])


@pytest.mark.slow
def test_scheduler_battery(scheduler_server: Served) -> None:
    base = scheduler_server.base_url
    valid = {
        "name": "battery",
        "cron": "0 3 * * 1-5",
        "timezone": "Africa/Addis_Ababa",
        "target": {"url": "https://example.com/hook", "headers": {"X-Team": "ops"}},
        "payload": {"report": "daily", "list": [1, "two"]},
        "retry_policy": {"max_attempts": 3, "multiplier": 2.0},
        "breaker": {"failure_threshold": 5},
    }
    with httpx.Client(timeout=15) as client:
        created = client.post(f"{base}/v1/schedules/", json=valid, headers=bearer())
        assert created.status_code == 201, created.text
        schedule_id = created.json()["id"]
        run = client.post(f"{base}/v1/schedules/{schedule_id}/trigger", headers=bearer())
        assert run.status_code == 202, run.text
        ids = {"schedule_id": schedule_id, "run_id": run.json()["id"]}
        bodies = {
            ("POST", "/v1/schedules/"): valid,
            ("PATCH", "/v1/schedules/{schedule_id}"): {
                k: v for k, v in valid.items() if k != "breaker"
            },
            ("POST", "/v1/schedules/{schedule_id}/pause"): {"reason": "maintenance"},
            ("POST", "/v1/schedules/preview"): {
                "cron": "0 3 * * *",
                "timezone": "UTC",
                "after": "2026-03-01T00:00:00Z",
                "count": 3,
            },
        }
        cases = _cases(scheduler_server, ids, bodies)
        statuses = _run(cases)
        _assert_clean(client, f"{base}/v1/schedules/?limit=100")
        _assert_clean(client, f"{base}/v1/schedules/{schedule_id}/runs")
    print("scheduler battery:", len(cases), "requests", dict(sorted(statuses.items())))
    assert len(cases) > 1000


@pytest.mark.slow
def test_notification_battery(notification_server: Served) -> None:
    base = notification_server.base_url
    valid = {
        "url": "https://example.com/hook",
        "event_types": ["schedule.*"],
        "description": "ops\nhook",
        "enabled": True,
    }
    with httpx.Client(timeout=15) as client:
        created = client.post(f"{base}/v1/subscriptions/", json=valid, headers=bearer())
        assert created.status_code == 201, created.text
        ids = {
            "sub_id": created.json()["id"],
            "delivery_id": "dlv_missing",
            "notification_id": "ntf_missing",
        }
        bodies = {
            ("POST", "/v1/subscriptions/"): valid,
            ("PATCH", "/v1/subscriptions/{sub_id}"): valid,
            ("PUT", "/v1/alert-contacts"): {"emails": ["ops@example.com", "b@example.org"]},
        }
        cases = _cases(notification_server, ids, bodies)
        statuses = _run(cases)
        _assert_clean(client, f"{base}/v1/subscriptions/?limit=100")
        _assert_clean(client, f"{base}/v1/alert-contacts")
    print("notification battery:", len(cases), "requests", dict(sorted(statuses.items())))
    assert len(cases) > 500


# Forged cursors: well-formed base64 of JSON the codec never writes. Each decodes to something
# Python holds but a query cannot (NUL, a lone surrogate, a time that overflows on the way to
# UTC or lies outside the accepted range) or to nothing at all (year 0 / 10000, a number).
_T = "2026-03-01T00:00:00Z"
FORGED_CURSOR_JSON: list[bytes] = [
    json.dumps({"t": _T, "i": "sch_\x00"}).encode(),
    json.dumps({"t": _T, "i": "\x00"}).encode(),
    json.dumps({"t": _T, "i": "sch_\ud800"}).encode(),  # escaped: "\ud800"
    '{"t": "2026-03-01T00:00:00Z", "i": "sch_\ud800"}'.encode("utf-8", "surrogatepass"),
    json.dumps({"t": "2026-03-01T00:00:00\x00Z", "i": "x"}).encode(),
    json.dumps({"t": "2026-03-01T00:00:00\udfffZ", "i": "x"}).encode(),
    json.dumps({"t": "9999-12-31T23:59:59-01:00", "i": "x"}).encode(),
    json.dumps({"t": "9999-12-31T23:59:59+00:00", "i": "x"}).encode(),
    json.dumps({"t": "0001-01-01T00:00:00+01:00", "i": "x"}).encode(),
    json.dumps({"t": "0001-01-01T00:00:00+00:00", "i": "x"}).encode(),
    json.dumps({"t": "1969-12-31T23:59:59+00:00", "i": "x"}).encode(),
    json.dumps({"t": "10000-01-01T00:00:00+00:00", "i": "x"}).encode(),
    json.dumps({"t": "0000-01-01T00:00:00+00:00", "i": "x"}).encode(),
    json.dumps({"t": 10**30, "i": "x"}).encode(),
    json.dumps({"t": 1e308, "i": "x"}).encode(),
    b'{"t": 1e999, "i": "x"}',
    json.dumps({"t": _T, "i": "x", "t\x00": "y"}).encode(),
]
# Instants Python parses but that overflow on the way to UTC, or lie outside the accepted range.
ODD_INSTANTS = [
    "9999-12-31T23:59:59-01:00",
    "9999-12-31T23:59:59Z",
    "9000-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00-01:00",
    "1969-12-31T23:59:59Z",
]


def _forged(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class _KeepAlive:
    """One real HTTP/1.1 connection: every answer must leave it open (a 500 drops it)."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=15)
        self.conn.connect()
        self.sock = self.conn.sock

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any], str]:
        headers = {**bearer(), "Connection": "keep-alive"}
        content = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            content = json.dumps(body).encode()
        self.conn.request(method, path, body=content, headers=headers)
        response = self.conn.getresponse()
        text = response.read().decode()
        label = f"{method} {path} {body!r:.200}"
        assert response.status < 500, f"{response.status}: {label} -> {text[:300]}"
        assert response.getheader("connection", "").lower() != "close", label
        assert self.conn.sock is self.sock, f"connection dropped after {label}"
        parsed = json.loads(text) if text else {}
        return response.status, parsed, label

    def close(self) -> None:
        self.conn.close()


def _assert_invalid_cursor(client: _KeepAlive, path: str) -> None:
    for raw in FORGED_CURSOR_JSON:
        sep = "&" if "?" in path else "?"
        status, body, label = client.request("GET", f"{path}{sep}cursor={_forged(raw)}")
        assert status == 400, (label, raw, body)
        assert body["type"].endswith("/invalid-cursor"), body
        assert body["field"] == "cursor", body


def test_forged_cursors_are_400_on_every_scheduler_list(scheduler_server: Served) -> None:
    client = _KeepAlive(scheduler_server.base_url)
    try:
        status, created, _ = client.request(
            "POST",
            "/v1/schedules/",
            {
                "name": "cursors",
                "cron": "0 3 * * *",
                "timezone": "UTC",
                "target": {"url": "https://example.com/hook"},
            },
        )
        assert status == 201, created
        lists = [
            "/v1/schedules/",
            f"/v1/schedules/{created['id']}/runs",
            "/v1/schedules/-/runs",
            f"/v1/schedules/{created['id']}/versions",
            f"/v1/schedules/{created['id']}/ledger",
            "/v1/destinations/",
        ]
        for path in lists:
            _assert_invalid_cursor(client, path)
            status, _, label = client.request("GET", path)  # and the list still answers
            assert status == 200, label
    finally:
        client.close()


def test_forged_cursors_are_400_on_every_notification_list(notification_server: Served) -> None:
    client = _KeepAlive(notification_server.base_url)
    try:
        status, created, _ = client.request(
            "POST", "/v1/subscriptions/", {"url": "https://example.com/hook", "event_types": ["*"]}
        )
        assert status == 201, created
        lists = [
            "/v1/subscriptions/",
            f"/v1/subscriptions/{created['id']}/deliveries",
            "/v1/notifications/",
        ]
        for path in lists:
            _assert_invalid_cursor(client, path)
            status, _, label = client.request("GET", path)
            assert status == 200, label
    finally:
        client.close()


def test_every_list_route_is_covered(scheduler_server: Served, notification_server: Served) -> None:
    """The nine lists above are every route that takes a cursor."""
    routes = set()
    for served in (scheduler_server, notification_server):
        paths: dict[str, dict[str, Any]] = served.openapi["paths"]  # type: ignore[assignment]
        for template, operations in paths.items():
            for method, operation in operations.items():
                names = {p["name"] for p in operation.get("parameters", [])}
                if "cursor" in names:
                    routes.add(f"{method.upper()} {template}")
    assert routes == {
        "GET /v1/schedules/",
        "GET /v1/schedules/{schedule_id}/runs",
        "GET /v1/schedules/-/runs",
        "GET /v1/schedules/{schedule_id}/versions",
        "GET /v1/schedules/{schedule_id}/ledger",
        "GET /v1/destinations/",
        "GET /v1/subscriptions/",
        "GET /v1/subscriptions/{sub_id}/deliveries",
        "GET /v1/notifications/",
    }


def test_out_of_range_instants_are_422_naming_the_field(scheduler_server: Served) -> None:
    client = _KeepAlive(scheduler_server.base_url)
    base = {"cron": "0 3 * * *", "timezone": "UTC"}
    create = {**base, "name": "instants", "target": {"url": "https://example.com/hook"}}
    try:
        status, created, _ = client.request("POST", "/v1/schedules/", create)
        assert status == 201, created
        sid = created["id"]
        # (method, path, body or None, field): the instant goes where `field` says.
        places: list[tuple[str, str, dict[str, Any] | None, str]] = [
            ("POST", "/v1/schedules/preview", {**base, "after": None}, "after"),
            ("POST", "/v1/schedules/preview", {**base, "start_at": None}, "start_at"),
            ("POST", "/v1/schedules/preview", {**base, "end_at": None}, "end_at"),
            ("POST", "/v1/schedules/preview", {"timezone": "UTC", "run_at": None}, "run_at"),
            ("POST", "/v1/schedules/", {**create, "start_at": None}, "start_at"),
            ("POST", "/v1/schedules/", {**create, "end_at": None}, "end_at"),
            ("POST", "/v1/schedules/", {**create, "cron": None, "run_at": None}, "run_at"),
            ("PATCH", f"/v1/schedules/{sid}", {"start_at": None}, "start_at"),
            ("PATCH", f"/v1/schedules/{sid}", {"end_at": None}, "end_at"),
            ("PATCH", f"/v1/schedules/{sid}", {"cron": None, "run_at": None}, "run_at"),
            ("GET", f"/v1/schedules/{sid}/runs?from=", None, "from"),
            ("GET", f"/v1/schedules/{sid}/runs?to=", None, "to"),
            ("GET", "/v1/schedules/-/runs?from=", None, "from"),
            ("GET", "/v1/schedules/-/runs?to=", None, "to"),
            (
                "POST",
                f"/v1/schedules/{sid}/backfill",
                {"from": None, "to": "2026-03-01T00:00:00Z", "dry_run": True},
                "from",
            ),
            (
                "POST",
                f"/v1/schedules/{sid}/backfill",
                {"from": "2026-03-01T00:00:00Z", "to": None, "dry_run": True},
                "to",
            ),
        ]
        for method, path, body, field in places:
            for instant in ODD_INSTANTS:
                if body is None:
                    status, problem, label = client.request(method, path + quote(instant))
                else:
                    filled = {k: (instant if v is None else v) for k, v in body.items()}
                    filled.update({k: None for k, v in body.items() if v is None and k != field})
                    status, problem, label = client.request(method, path, filled)
                assert status == 422, (label, problem)
                assert problem["field"] == field, (label, problem)
        # The edges of the range are accepted.
        for instant in ("1970-01-01T00:00:00Z", "8999-12-31T23:59:59Z"):
            status, _, label = client.request("GET", "/v1/schedules/-/runs?from=" + quote(instant))
            assert status == 200, label
    finally:
        client.close()
