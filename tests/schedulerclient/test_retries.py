"""Retry semantics against a scripted server (httpx.MockTransport): which calls are repeated, how
long the client waits (`Retry-After` in seconds or as an HTTP date), and the two bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from schedulerclient import ApiError, AsyncClient, Client, TransportError

SCHEDULE = {
    "id": "sch_1",
    "name": "n",
    "description": None,
    "cron": "0 3 * * *",
    "run_at": None,
    "timezone": "UTC",
    "dst_policy": "shift",
    "start_at": None,
    "end_at": None,
    "max_runs": None,
    "jitter_seconds": 0,
    "action": "webhook",
    "target": None,
    "payload": None,
    "retry_policy": {
        "max_attempts": 5,
        "initial_backoff_seconds": 10,
        "max_backoff_seconds": 3600,
        "multiplier": 2.0,
        "max_retry_duration_seconds": 86400,
    },
    "misfire_policy": "fire_once",
    "overlap_policy": "allow",
    "breaker": {"failure_threshold": 5},
    "completion": {"mode": "response"},
    "labels": {},
    "key": None,
    "state": "active",
    "paused_reason": None,
    "next_run_at": None,
    "created_at": "2026-03-01T00:00:00Z",
    "updated_at": "2026-03-01T00:00:00Z",
    "version": 1,
    "last_run": None,
    "next_occurrence_at": None,
    "consecutive_failures": 0,
}
RUN = {
    "id": "run_1",
    "schedule_id": "sch_1",
    "scheduled_for": "2026-03-01T00:00:00Z",
    "due_at": "2026-03-01T00:00:00Z",
    "trigger": "manual",
    "status": "pending",
    "skip_reason": None,
    "attempt_count": 0,
    "next_attempt_at": None,
    "started_at": None,
    "finished_at": None,
}
BUSY = {"type": "https://scheduler-platform.dev/problems/unavailable", "title": "Unavailable"}

Answer = httpx.Response | Exception


class Script:
    """Answers requests in order from `answers`; records each request."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def busy(status: int = 503, retry_after: str | None = "2") -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(status, json={**BUSY, "status": status}, headers=headers)


def ok(status: int = 200) -> httpx.Response:
    return httpx.Response(status, json={**SCHEDULE, "secret": "whsec_x"})


def client_for(script: Script, **kwargs: object) -> tuple[Client, list[float]]:
    slept: list[float] = []
    client = Client(
        "http://api.test",
        "tok",
        transport=httpx.MockTransport(script),
        sleep=slept.append,
        **kwargs,  # type: ignore[arg-type]
    )
    return client, slept


def test_a_get_is_retried_on_503_after_what_retry_after_says() -> None:
    script = Script(busy(503, "2"), busy(429, "1"), ok())
    client, slept = client_for(script)
    assert client.get_schedule("sch_1").id == "sch_1"
    assert slept == [2.0, 1.0]
    assert len(script.requests) == 3


def test_retry_after_as_an_http_date() -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    script = Script(busy(503, soon), ok())
    client, slept = client_for(script)
    client.get_schedule("sch_1")
    (waited,) = slept
    assert 15 <= waited <= 20


def test_without_retry_after_the_wait_grows() -> None:
    script = Script(busy(503, None), busy(503, None), ok())
    client, slept = client_for(script)
    client.get_schedule("sch_1")
    assert slept == [0.5, 1.0]


def test_at_most_max_retries_then_the_last_answer_is_raised() -> None:
    script = Script(busy(), busy(), busy(), ok())
    client, slept = client_for(script, max_retries=2)
    with pytest.raises(ApiError) as err:
        client.get_schedule("sch_1")
    assert err.value.status == 503
    assert err.value.retry_after == 2.0
    assert len(script.requests) == 3
    assert slept == [2.0, 2.0]


def test_a_retry_after_beyond_the_wait_budget_raises_at_once() -> None:
    script = Script(busy(429, "3600"), ok())
    client, slept = client_for(script, max_retry_wait=30)
    with pytest.raises(ApiError) as err:
        client.get_schedule("sch_1")
    assert (err.value.status, err.value.retry_after) == (429, 3600.0)
    assert slept == []
    assert len(script.requests) == 1


def test_the_budget_counts_every_wait_of_the_call() -> None:
    script = Script(busy(503, "20"), busy(503, "20"), ok())
    client, slept = client_for(script, max_retries=5, max_retry_wait=30)
    with pytest.raises(ApiError):
        client.get_schedule("sch_1")
    assert slept == [20.0]


def test_create_is_retried_with_the_same_idempotency_key() -> None:
    script = Script(busy(503, "1"), ok(201))
    client, _ = client_for(script)
    created = client.create_schedule(name="n", cron="0 3 * * *", timezone="UTC")
    assert created.secret == "whsec_x"
    first, second = script.requests
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
    assert first.content == second.content


def test_a_post_without_an_idempotency_key_is_not_retried() -> None:
    script = Script(busy(503, "1"), ok())
    client, slept = client_for(script)
    with pytest.raises(ApiError) as err:
        client.trigger_schedule("sch_1")
    assert err.value.status == 503
    assert slept == []
    assert len(script.requests) == 1


def test_other_errors_are_not_retried() -> None:
    script = Script(httpx.Response(500, json={"title": "boom", "detail": "it broke"}), ok())
    client, slept = client_for(script)
    with pytest.raises(ApiError, match="it broke"):
        client.get_schedule("sch_1")
    assert slept == []


def test_a_refused_connection_is_retried_even_for_a_post() -> None:
    # Nothing reached the server, so repeating cannot trigger twice.
    script = Script(httpx.ConnectError("refused"), httpx.Response(202, json=RUN))
    client, slept = client_for(script)
    assert client.trigger_schedule("sch_1").id == "run_1"
    assert slept == [0.5]
    assert len(script.requests) == 2


def test_a_dropped_answer_is_retried_only_when_repeating_is_safe() -> None:
    get = Script(httpx.ReadError("reset"), ok())
    client, slept = client_for(get)
    client.get_schedule("sch_1")
    assert slept == [0.5]
    post = Script(httpx.ReadError("reset"), ok())
    client, slept = client_for(post)
    with pytest.raises(TransportError) as err:
        client.pause_schedule("sch_1")
    assert isinstance(err.value.__cause__, httpx.ReadError)
    assert slept == []


def test_a_body_that_is_not_a_problem_still_makes_a_readable_error() -> None:
    script = Script(httpx.Response(502, text="<html>Bad gateway</html>"))
    client, _ = client_for(script)
    with pytest.raises(ApiError) as err:
        client.get_schedule("sch_1")
    assert err.value.status == 502
    assert "Bad gateway" in str(err.value)


async def test_the_async_client_retries_alike() -> None:
    script = Script(busy(503, "2"), busy(429, None), ok())
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async with AsyncClient(
        "http://api.test", "tok", transport=httpx.MockTransport(script), sleep=sleep
    ) as client:
        assert (await client.get_schedule("sch_1")).id == "sch_1"
    assert slept == [2.0, 1.0]


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        Client(max_retries=-1)
