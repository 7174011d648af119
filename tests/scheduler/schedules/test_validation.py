"""Validation: each bad input is a 422 problem naming the offending field; unknown fields are
refused; FastAPI's own 404/405/422 are problem+json too."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body

T = "https://example.com/hook"

CASES: list[tuple[str, dict[str, Any], str]] = [
    ("unknown top-level field", {"colour": "red"}, "colour"),
    ("name too long", {"name": "x" * 201}, "name"),
    ("empty name", {"name": ""}, "name"),
    ("six-field cron", {"cron": "0 0 3 * * 1"}, "cron"),
    ("garbage cron", {"cron": "every day"}, "cron"),
    ("unknown zone", {"timezone": "Mars/Olympus"}, "timezone"),
    ("path as zone", {"timezone": "../../etc/passwd"}, "timezone"),
    ("bad action", {"action": "email"}, "action"),
    ("webhook without target", {"target": None}, "target"),
    ("event with target", {"action": "event"}, "target"),
    ("ftp url", {"target": {"url": "ftp://example.com/x"}}, "target.url"),
    ("localhost url", {"target": {"url": "http://localhost/x"}}, "target.url"),
    ("loopback literal", {"target": {"url": "http://127.0.0.1/x"}}, "target.url"),
    ("metadata literal", {"target": {"url": "http://169.254.169.254/"}}, "target.url"),
    ("url too long", {"target": {"url": T + "?" + "a" * 2100}}, "target.url"),
    ("fullwidth port", {"target": {"url": "https://example.com:\uff18\uff10/x"}}, "target.url"),
    ("plus-signed port", {"target": {"url": "https://example.com:+443/x"}}, "target.url"),
    ("unknown target field", {"target": {"url": T, "method": "GET"}}, "target.method"),
    ("timeout too big", {"target": {"url": T, "timeout_seconds": 61}}, "target.timeout_seconds"),
    ("timeout zero", {"target": {"url": T, "timeout_seconds": 0}}, "target.timeout_seconds"),
    ("reserved header", {"target": {"url": T, "headers": {"X-Signature": "x"}}}, "target.headers"),
    ("our context header", {"target": {"url": T, "headers": {"x-trigger": "x"}}}, "target.headers"),
    ("host header", {"target": {"url": T, "headers": {"Host": "evil"}}}, "target.headers"),
    ("webhook- header", {"target": {"url": T, "headers": {"webhook-x": "1"}}}, "target.headers"),
    ("CRLF in header", {"target": {"url": T, "headers": {"X-A": "a\r\nB: c"}}}, "target.headers"),
    (
        "too many headers",
        {"target": {"url": T, "headers": {f"X-H{i}": "v" for i in range(21)}}},
        "target.headers",
    ),
    ("payload too big", {"payload": {"blob": "x" * 65_536}}, "payload"),
    ("max_attempts 0", {"retry_policy": {"max_attempts": 0}}, "retry_policy.max_attempts"),
    ("max_attempts 51", {"retry_policy": {"max_attempts": 51}}, "retry_policy.max_attempts"),
    (
        "backoff below 1 s",
        {"retry_policy": {"initial_backoff_seconds": 0.5}},
        "retry_policy.initial_backoff_seconds",
    ),
    (
        "max below initial",
        {"retry_policy": {"initial_backoff_seconds": 100, "max_backoff_seconds": 10}},
        "retry_policy.max_backoff_seconds",
    ),
    ("multiplier 0", {"retry_policy": {"multiplier": 0}}, "retry_policy.multiplier"),
    ("breaker 0", {"breaker": {"failure_threshold": 0}}, "breaker.failure_threshold"),
    ("bad misfire", {"misfire_policy": "sometimes"}, "misfire_policy"),
]


@pytest.mark.parametrize(("label", "override", "field"), CASES, ids=[c[0] for c in CASES])
async def test_create_refuses(
    client: httpx.AsyncClient, label: str, override: dict[str, Any], field: str
) -> None:
    r = await client.post("/v1/schedules/", json=schedule_body(**override), headers=auth())
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == 422
    assert problem["type"].endswith("/validation-error")
    assert problem["field"] == field, problem
    assert problem["detail"]
    assert (await client.get("/v1/schedules/", headers=auth())).json()["items"] == []


async def test_cron_error_carries_engine_message(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/schedules/", json=schedule_body(cron="0 25 * * *"), headers=auth())
    assert r.status_code == 422
    # The engine's one-line message names the field and the token.
    assert "25" in r.json()["detail"]


async def test_patch_refuses_null_and_unknown(client: httpx.AsyncClient) -> None:
    s = (await client.post("/v1/schedules/", json=schedule_body(), headers=auth())).json()
    for body, field in [({"name": None}, "name"), ({"nope": 1}, "nope"), ({"cron": "x"}, "cron")]:
        r = await client.patch(f"/v1/schedules/{s['id']}", json=body, headers=auth())
        assert r.status_code == 422, r.text
        assert r.json()["field"] == field
    assert (await client.get(f"/v1/schedules/{s['id']}", headers=auth())).json()["version"] == 1


async def test_malformed_json_is_400_naming_line_and_column(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/schedules/",
        content=b'{"name": "a",\n  not json',
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["type"].endswith("/invalid-json")
    assert (problem["line"], problem["column"]) == (2, 3)
    assert "line 2, column 3" in problem["detail"]


async def test_framework_errors_are_problems(client: httpx.AsyncClient) -> None:
    r = await client.get("/nowhere", headers=auth())
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/problem+json"
    r = await client.put("/v1/schedules/", headers=auth())
    assert r.status_code == 405
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"].endswith("/method-not-allowed")


async def test_oversized_body_is_413(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/schedules/",
        content=b'{"name": "' + b"x" * 300_000 + b'"}',
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert r.headers["content-type"] == "application/problem+json"


async def test_quota_max_schedules_names_the_limit(client: httpx.AsyncClient, app: Any) -> None:
    from scheduler.domain.tenant import Entitlements

    app.state.ctx.limits_for = lambda _t: Entitlements(max_schedules=2)
    for _ in range(2):
        assert (
            await client.post("/v1/schedules/", json=schedule_body(), headers=auth())
        ).status_code == 201
    r = await client.post("/v1/schedules/", json=schedule_body(), headers=auth())
    # 403: a well-formed request the tenant's plan does not allow.
    assert r.status_code == 403
    assert r.json()["type"].endswith("/quota-exceeded")
    assert r.json()["limit"] == "max_schedules"
    assert r.json()["limit_value"] == 2
    assert r.json()["current"] == 3
    # A deleted schedule stops counting.
    first = (await client.get("/v1/schedules/", headers=auth())).json()["items"][0]["id"]
    assert (await client.delete(f"/v1/schedules/{first}", headers=auth())).status_code == 204
    assert (
        await client.post("/v1/schedules/", json=schedule_body(), headers=auth())
    ).status_code == 201
