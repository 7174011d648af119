"""Where a client sends each call, and what it reads from the environment."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from pydantic import ValidationError

from schedulerclient import Client


def _seen(client_kwargs: dict[str, object]) -> tuple[Client, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/healthz":
            return httpx.Response(200, json={"status": "ok"})
        return httpx.Response(200, json={"items": [], "next_cursor": None})

    client = Client(transport=httpx.MockTransport(answer), **client_kwargs)  # type: ignore[arg-type]
    return client, seen


def test_the_defaults_are_make_runs_two_ports() -> None:
    client = Client()
    assert (client.base_url, client.notification_url) == (
        "http://127.0.0.1:8089",
        "http://127.0.0.1:8088",
    )


def test_a_gateway_origin_serves_both_apis_unless_told_otherwise() -> None:
    assert Client("https://api.example.com/").notification_url == "https://api.example.com"
    split = Client("https://s.example.com", notification_url="https://n.example.com")
    assert split.notification_url == "https://n.example.com"


def test_each_operation_goes_to_its_service() -> None:
    client, seen = _seen({"base_url": "http://s.test", "notification_url": "http://n.test"})
    client.get_scheduler_health()
    client.get_notification_health()
    assert [str(r.url) for r in seen] == ["http://s.test/healthz", "http://n.test/healthz"]
    assert all("Authorization" not in r.headers for r in seen)  # no token, no header


def test_from_env_reads_url_token_and_notification_url() -> None:
    env = {
        "SCHEDULER_URL": "http://s.test",
        "SCHEDULER_TOKEN": "tok",
        "NOTIFICATION_URL": "http://n.test",
    }
    client = Client.from_env(env)
    assert (client.base_url, client.notification_url) == ("http://s.test", "http://n.test")
    assert Client.from_env(env, base_url="http://other.test").base_url == "http://other.test"
    assert Client.from_env({}).base_url == "http://127.0.0.1:8089"


def test_query_values_are_written_as_the_api_reads_them() -> None:
    client, seen = _seen({"base_url": "http://s.test", "token": "t"})
    page = client.list_tenant_runs(
        from_=datetime(2026, 3, 1, tzinfo=UTC), status="failed", schedule_id=None
    )
    assert page.items == []
    (request,) = seen
    assert request.url.params.multi_items() == [
        ("status", "failed"),
        ("from", "2026-03-01T00:00:00+00:00"),
    ]
    client.close()


def test_keys_with_slashes_stay_one_path_segment() -> None:
    client, seen = _seen({"base_url": "http://s.test"})
    with pytest.raises(ValidationError):  # the scripted answer is not a schedule
        client.put_schedule_by_key("billing/nightly:v1", {"name": "n"})
    assert seen[-1].url.raw_path == b"/v1/schedules/by-key/billing%2Fnightly%3Av1"
