"""Through the API: a cron the engine gives up on (no occurrence within MAX_GAP_YEARS) is a 422
naming `cron` and the bound on preview, create and PATCH, after a bounded walk; a rare but valid
one previews; engine walks run in a worker thread, never on the event loop."""

from __future__ import annotations

import threading

import httpx
import pytest

from scheduler.domain import occurrences
from scheduler.domain.occurrences import MAX_GAP_YEARS, Recurrence
from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body

URL = "/v1/schedules/"
PREVIEW = URL + "preview"
STARVED = {"cron": "30 2 8-14 3 */7", "timezone": "America/New_York", "dst_policy": "skip"}
# A walk to the bound probes at most this many (zone, decade) offset tables per zone.
DECADES_PER_WALK = MAX_GAP_YEARS // 10 + 2


def _refused_for_the_bound(r: httpx.Response) -> None:
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["field"] == "cron", problem
    assert f"less than once in {MAX_GAP_YEARS} years" in problem["detail"], problem


async def test_a_starved_cron_is_refused_after_a_bounded_walk(client: httpx.AsyncClient) -> None:
    occurrences._decade_transitions.cache_clear()
    previewed = await client.post(PREVIEW, json={**STARVED, "count": 100}, headers=auth())
    _refused_for_the_bound(previewed)
    # The walk stopped at the bound: before, it probed every decade up to the year 9999 (~800).
    assert occurrences._decade_transitions.cache_info().misses <= DECADES_PER_WALK
    created = await client.post(URL, json=schedule_body(**STARVED), headers=auth())
    _refused_for_the_bound(created)


async def test_patch_to_a_starved_cron_is_refused(client: httpx.AsyncClient) -> None:
    r = await client.post(URL, json=schedule_body(), headers=auth())
    assert r.status_code == 201, r.text
    patched = await client.patch(URL + r.json()["id"], json=STARVED, headers=auth())
    _refused_for_the_bound(patched)
    kept = await client.get(URL + r.json()["id"], headers=auth())
    assert kept.json()["cron"] == schedule_body()["cron"]


async def test_a_rare_but_valid_cron_previews(client: httpx.AsyncClient) -> None:
    # February 29 on a Sunday (AND rule), every 28 or 40 years; and with the OR rule,
    # February 29 or any Monday of February.
    for cron, first in (
        ("0 0 29 2 */7", "2032-02-29T00:00:00-05:00"),
        ("0 0 29 2 1", "2027-02-01T00:00:00-05:00"),
    ):
        body = {"cron": cron, "timezone": "America/New_York", "dst_policy": "skip", "count": 3}
        r = await client.post(PREVIEW, json=body, headers=auth())
        assert r.status_code == 200, r.text
        items = r.json()["items"]
        assert len(items) == 3
        assert items[0]["at"] == first


async def test_an_impossible_cron_is_refused_at_parse(client: httpx.AsyncClient) -> None:
    r = await client.post(PREVIEW, json={"cron": "0 0 31 2 *", "timezone": "UTC"}, headers=auth())
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "cron"


async def test_engine_walks_run_off_the_event_loop(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A spy on the real engine: every month a walk examines goes through _matching_days; note
    # the thread. The ASGI app runs on this test's event loop, in this thread.
    loop_thread = threading.get_ident()
    threads: list[int] = []
    real = Recurrence._matching_days

    def spy(self: Recurrence, year: int, month: int) -> tuple[int, ...]:
        threads.append(threading.get_ident())
        return real(self, year, month)

    monkeypatch.setattr(Recurrence, "_matching_days", spy)
    daily = {"cron": "30 2 * * *", "timezone": "America/New_York", "jitter_seconds": 60}
    steps = [
        client.post(PREVIEW, json={**daily, "count": 100}, headers=auth()),
        client.post(PREVIEW, json={**STARVED, "count": 100}, headers=auth()),
    ]
    for step in steps:
        await step
    created = await client.post(URL, json=schedule_body(**daily), headers=auth())
    assert created.status_code == 201, created.text
    path = URL + created.json()["id"]
    for call in (
        client.get(path + "/occurrences", params={"count": 100}, headers=auth()),
        client.patch(path, json={"cron": "0 4 * * *"}, headers=auth()),
        client.post(path + "/pause", headers=auth()),
        client.post(path + "/resume", headers=auth()),
    ):
        r = await call
        assert r.status_code == 200, r.text
    assert threads, "the spy saw no walk"
    assert loop_thread not in threads
