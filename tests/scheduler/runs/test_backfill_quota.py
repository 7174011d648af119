"""max_runs_per_day for backfills (SQLite and PostgreSQL, over HTTP): a tenant without an
entitlements event has the configured default (SCHEDULER_DEFAULT_MAX_RUNS_PER_DAY), and the
quota counts runs by the UTC day they are created, so backfilling past days spends today's
runs: one request per past day cannot queue more than the daily limit today."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa
from asgi_lifespan import LifespanManager
from pydantic import SecretStr

from authclient import AuthSettings
from scheduler.adapters.db.tables import runs
from scheduler.bootstrap import Container, bootstrap
from scheduler.domain.tenant import quota_day
from scheduler.entrypoints.api.app import app_from_container
from scheduler.service_layer import tenant_events
from tests.scheduler.conftest import HS256_KEY, auth
from tests.scheduler.runs.conftest import SECRET, T0, ManualClock, add_schedule, make_settings
from tests.scheduler.tenant.conftest import entitlements_event

HOURLY = "0 * * * *"
HALF_HOURLY = "*/30 * * * *"
DAY_START, _ = quota_day(T0)


@pytest.fixture
async def limited(database_url: str) -> AsyncIterator[Container]:
    """A container whose default max_runs_per_day is 12 (no entitlements event needed)."""
    c = bootstrap(
        make_settings(database_url, default_max_runs_per_day=12),
        clock=ManualClock(),
        auth_settings=AuthSettings(AUTH_HS256_KEY=SecretStr(HS256_KEY)),
        new_secret=lambda: SECRET,
    )
    yield c
    await c.aclose()


async def _client(container: Container) -> AsyncIterator[httpx.AsyncClient]:
    app = app_from_container(container)
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://scheduler.test") as c:
            yield c


@pytest.fixture
async def limited_client(limited: Container) -> AsyncIterator[httpx.AsyncClient]:
    async for c in _client(limited):
        yield c


async def _runs_created_today(container: Container, tenant: str = "tenant-a") -> int:
    start, end = quota_day(T0)
    async with container.engine.connect() as conn:
        n = await conn.scalar(
            sa.select(sa.func.count())
            .select_from(runs)
            .where(runs.c.tenant_id == tenant, runs.c.status != "skipped")
            .where(runs.c.created_at >= start, runs.c.created_at < end)
        )
    return int(n or 0)


def _range(after: datetime, until: datetime) -> dict[str, str]:
    return {"from": after.isoformat(), "to": until.isoformat()}


async def test_backfill_honours_the_configured_default_max_runs_per_day(
    limited: Container, limited_client: httpx.AsyncClient
) -> None:
    s = await add_schedule(limited, "http://127.0.0.1:9/x", cron=HALF_HOURLY)
    path = f"/v1/schedules/{s.id}/backfill"
    # (02:30:30, 09:00:30] holds 13 half-hours: one over the default of 12.
    r = await limited_client.post(
        path, json=_range(T0 - timedelta(hours=6, minutes=30), T0), headers=auth()
    )
    assert r.status_code == 403, r.text
    body = r.json()
    assert (body["limit"], body["limit_value"], body["current"]) == ("max_runs_per_day", 12, 13)
    assert await _runs_created_today(limited) == 0
    # 12 fit, and then nothing more today.
    ok = await limited_client.post(path, json=_range(T0 - timedelta(hours=6), T0), headers=auth())
    assert (ok.status_code, ok.json()) == (202, {"created": 12, "existing": 0}), ok.text
    other = await add_schedule(limited, "http://127.0.0.1:9/x", cron=HALF_HOURLY, name="other")
    more = await limited_client.post(
        f"/v1/schedules/{other.id}/backfill",
        json=_range(T0 - timedelta(minutes=30), T0),
        headers=auth(),
    )
    assert more.status_code == 403, more.text
    assert (more.json()["limit_value"], more.json()["current"]) == (12, 13)
    assert await _runs_created_today(limited) == 12


async def test_backfilling_past_days_spends_todays_runs(
    container: Container, client: httpx.AsyncClient
) -> None:
    await tenant_events.apply_events(
        container.uow_factory(),
        [entitlements_event("tenant-a", T0, {"max_runs_per_day": 30})],
        T0,
    )
    s = await add_schedule(container, "http://127.0.0.1:9/x", cron=HOURLY)
    path = f"/v1/schedules/{s.id}/backfill"

    def past_day(n: int) -> dict[str, str]:
        """Day n before today: (00:00:00 - 1 s, 23:59:59], its 24 hourly occurrences."""
        start = DAY_START - timedelta(days=n)
        return _range(start - timedelta(seconds=1), start + timedelta(days=1, seconds=-1))

    first = await client.post(path, json=past_day(1), headers=auth())
    assert (first.status_code, first.json()) == (202, {"created": 24, "existing": 0}), first.text
    # Another past day holds only 24 occurrences, under the limit; today it would be 48.
    second = await client.post(path, json=past_day(2), headers=auth())
    assert second.status_code == 403, second.text
    body = second.json()
    assert (body["limit"], body["limit_value"], body["current"]) == ("max_runs_per_day", 30, 48)
    # Six more fit today: (17:59:59, 23:59:59] of day 3.
    start = DAY_START - timedelta(days=3)
    six = _range(start + timedelta(hours=18, seconds=-1), start + timedelta(days=1, seconds=-1))
    last = await client.post(path, json=six, headers=auth())
    assert (last.status_code, last.json()) == (202, {"created": 6, "existing": 0}), last.text
    assert await _runs_created_today(container) == 30
