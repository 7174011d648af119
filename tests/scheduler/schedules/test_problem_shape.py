"""What a first-hour mistake reads: an unknown zone's 422 suggests the key meant, a field error
names its field once, and every problem carries `instance` (the path, never the query)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body

PROBLEM = "application/problem+json"


@pytest.mark.parametrize(
    ("zone", "meant"),
    [
        ("America/NewYork", "America/New_York"),  # the underscore left out
        ("america/new_york", "America/New_York"),  # case
        ("America/New York", "America/New_York"),  # a space for the underscore
        ("Europe/Pariss", "Europe/Paris"),  # a typo
        ("Asia/Calcuta", "Asia/Calcutta"),
    ],
)
async def test_unknown_zone_suggests_the_closest_keys(
    client: httpx.AsyncClient, zone: str, meant: str
) -> None:
    r = await client.post("/v1/schedules/", json=schedule_body(timezone=zone), headers=auth())
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["field"] == "timezone"
    assert f"did you mean {meant}" in problem["detail"], problem
    preview = await client.post(
        "/v1/schedules/preview", json={"cron": "0 9 * * *", "timezone": zone}, headers=auth()
    )
    assert preview.status_code == 422, preview.text
    assert f"did you mean {meant}" in preview.json()["detail"]


async def test_a_far_off_zone_gets_no_suggestion_and_aliases_stay_valid(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post(
        "/v1/schedules/", json=schedule_body(timezone="Mars/Olympus"), headers=auth()
    )
    assert r.status_code == 422
    assert "did you mean" not in r.json()["detail"]
    ok = await client.post(
        "/v1/schedules/", json=schedule_body(timezone="US/Eastern"), headers=auth()
    )
    assert ok.status_code == 201, ok.text


# Each refusal of a service-layer or schema rule, one per field the issue saw repeated.
FIELD_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("unknown zone", {"timezone": "America/NewYork"}, "timezone"),
    ("path as zone", {"timezone": "../../etc/passwd"}, "timezone"),
    ("six-field cron", {"cron": "0 0 3 * * 1"}, "cron"),
    ("impossible cron", {"cron": "0 0 30 2 *"}, "cron"),
    ("macro", {"cron": "@reboot"}, "cron"),
    ("run_at in the past", {"cron": None, "run_at": "2000-01-01T00:00:00Z"}, "run_at"),
    (
        "end before start",
        {"start_at": "2031-01-02T00:00:00Z", "end_at": "2031-01-01T00:00:00Z"},
        "end_at",
    ),
    ("start_at without offset", {"start_at": "2031-01-02T00:00:00"}, "start_at"),
    ("max_attempts 0", {"retry_policy": {"max_attempts": 0}}, "retry_policy.max_attempts"),
    (
        "max below initial",
        {"retry_policy": {"initial_backoff_seconds": 100, "max_backoff_seconds": 10}},
        "retry_policy.max_backoff_seconds",
    ),
    ("localhost url", {"target": {"url": "http://localhost/x"}}, "target.url"),
]


@pytest.mark.parametrize(
    ("label", "override", "field"), FIELD_CASES, ids=[c[0] for c in FIELD_CASES]
)
async def test_a_field_error_names_its_field_once(
    client: httpx.AsyncClient, label: str, override: dict[str, Any], field: str
) -> None:
    r = await client.post("/v1/schedules/", json=schedule_body(**override), headers=auth())
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["field"] == field, problem
    assert problem["detail"].startswith(f"{field}: "), problem
    assert not problem["detail"].startswith(f"{field}: {field}:"), problem
    for error in problem["errors"]:
        assert not error["detail"].startswith(f"{error['field']}:"), problem
    # No segment of the message repeats: "cron: expression: ..." says "cron" twice in effect.
    assert not problem["detail"].startswith("cron: expression:"), problem


async def _event_schedule(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.post(
        "/v1/schedules/", json=schedule_body(action="event", target=None), headers=auth()
    )
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_every_problem_carries_its_path_as_instance(client: httpx.AsyncClient) -> None:
    created = await _event_schedule(client)
    sid = created["id"]
    token_in_query = "?access_token=sekrit&limit=5"
    answers = {
        "401 without token": await client.get("/v1/schedules/" + token_in_query),
        "401 bad token": await client.get(
            "/v1/schedules/" + token_in_query, headers={"Authorization": "Bearer nope"}
        ),
        "403 missing scope": await client.post(
            "/v1/schedules/" + token_in_query,
            json=schedule_body(),
            headers=auth(scopes=("schedules:read",)),
        ),
        "404 unknown id": await client.get(
            "/v1/schedules/sch_missing" + token_in_query, headers=auth()
        ),
        "404 another tenant's id": await client.get(
            f"/v1/schedules/{sid}", headers=auth("tenant-b")
        ),
        "404 unknown route": await client.get("/v1/nowhere" + token_in_query, headers=auth()),
        "405": await client.delete("/v1/schedules/" + token_in_query, headers=auth()),
        "409 not a webhook": await client.post(
            f"/v1/schedules/{sid}/secret/rotate", headers=auth()
        ),
        "412": await client.patch(
            f"/v1/schedules/{sid}", json={"name": "x"}, headers={**auth(), "If-Match": '"99"'}
        ),
        "422": await client.post(
            "/v1/schedules/" + token_in_query,
            json=schedule_body(timezone="Mars/Olympus"),
            headers=auth(),
        ),
        "413": await client.post(
            "/v1/schedules/" + token_in_query,
            content=b'{"name": "' + b"x" * (300 * 1024) + b'"}',
            headers={**auth(), "Content-Type": "application/json"},
        ),
    }
    without_instance = []
    for label, r in answers.items():
        assert r.status_code == int(label.split()[0]), (label, r.status_code, r.text)
        assert r.headers["content-type"] == PROBLEM, label
        assert "sekrit" not in r.text, label
        if r.json().get("instance") != r.request.url.path:
            without_instance.append(label)
    assert without_instance == []
