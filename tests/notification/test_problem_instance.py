"""Every problem the notification API answers carries `instance`: the request's path, never its
query (a query may carry a token), whichever layer refused it (auth, router, handler, body
limit)."""

from __future__ import annotations

from tests.notification.api import subscribe
from tests.notification.conftest import Harness, token

PROBLEM = "application/problem+json"
QUERY = "?access_token=sekrit&limit=5"


async def test_every_problem_carries_its_path_as_instance(harness: Harness) -> None:
    c = harness.client
    sub = await subscribe(harness)
    hook = {"url": "http://127.0.0.1:9/hook", "event_types": ["schedule.*"]}
    answers = {
        "401 without token": await c.get("/v1/subscriptions/" + QUERY),
        "401 bad token": await c.get(
            "/v1/subscriptions/" + QUERY, headers={"Authorization": "Bearer nope"}
        ),
        "403 missing scope": await c.post(
            "/v1/subscriptions/" + QUERY, json=hook, headers=token("t1", ["notifications:read"])
        ),
        "404 unknown id": await c.get("/v1/subscriptions/sub_missing" + QUERY, headers=token("t1")),
        "404 another tenant's id": await c.get(
            f"/v1/subscriptions/{sub['id']}", headers=token("t2")
        ),
        "404 unknown route": await c.get("/v1/nowhere" + QUERY, headers=token("t1")),
        "405": await c.delete("/v1/subscriptions/" + QUERY, headers=token("t1")),
        "422": await c.post(
            "/v1/subscriptions/" + QUERY, json={**hook, "url": "ftp://x"}, headers=token("t1")
        ),
        "413": await c.post(
            "/v1/subscriptions/" + QUERY,
            content=b'{"url": "' + b"x" * (2 * 1024 * 1024) + b'"}',
            headers={**token("t1"), "Content-Type": "application/json"},
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
