"""Fixtures: a migrated notification service on SQLite (and PostgreSQL when TEST_POSTGRES_URL is
set), an in-process ASGI client, tokens, a settable clock, and a loopback webhook receiver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from pydantic import SecretStr

from authclient import AuthSettings, TokenVerifier, mint_token
from eventbus import InProcessBus
from notification.config import NotificationSettings
from notification.entrypoints.runtime import NotificationApp, build_notification
from servicekit.data.secretbox import generate_key
from tests.notification.smtp import smtp_server  # noqa: F401  (fixture)
from tests.support.kafka import kafka_bootstrap, tansu_broker  # noqa: F401  (fixtures)
from tests.support.pg import fresh_postgres_database

AUTH_KEY = "test-hs256-key-" + "x" * 40
RW = ["notifications:read", "notifications:write"]


class FakeClock:
    """Injected into the service: tests move time forward instead of sleeping."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


@pytest.fixture
def clock() -> FakeClock:
    # Close to the real time: the receiver verifies X-Timestamp with a 5-minute tolerance.
    return FakeClock(datetime.now(UTC).replace(microsecond=0))


def token(tenant: str, scopes: list[str] | None = None) -> dict[str, str]:
    raw = mint_token(AUTH_KEY, tenant_id=tenant, scopes=RW if scopes is None else scopes)
    return {"Authorization": f"Bearer {raw}"}


def make_settings(tmp_path: Path, db_url: str, **overrides: Any) -> NotificationSettings:
    values: dict[str, Any] = {
        "database_url": db_url,
        "secret_key": SecretStr(generate_key()),
        "var_dir": tmp_path / "var",
        "webhook_allow_private_networks": True,
        "kafka_bootstrap_servers": None,
        "smtp_url": None,
        "dev": True,  # migrate on start
        "poll_interval_seconds": 0.05,
    }
    values.update(overrides)
    return NotificationSettings(**values)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/notification.db"
    else:
        async with fresh_postgres_database("notif") as url:
            yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path}/notification.db"


@dataclass
class Harness:
    app: NotificationApp
    bus: InProcessBus
    client: httpx.AsyncClient
    clock: FakeClock
    settings: NotificationSettings


@pytest.fixture
async def make_harness(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Callable[..., Any]]:
    """Build a started service (workers not running: tests drive each step explicitly)."""
    started: list[Harness] = []

    async def factory(db: str, **overrides: Any) -> Harness:
        bus = overrides.pop("bus", None) or InProcessBus()
        mailer = overrides.pop("mailer", None)
        run_workers = overrides.pop("run_workers", False)
        settings = make_settings(tmp_path, db, **overrides)
        verifier = TokenVerifier(AuthSettings(AUTH_HS256_KEY=SecretStr(AUTH_KEY)))
        app = build_notification(settings, bus, clock=clock, verifier=verifier, mailer=mailer)
        await app.start(run_workers=run_workers)
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app.asgi_app), base_url="http://notification"
        )
        h = Harness(app, bus, client, clock, settings)
        started.append(h)
        return h

    yield factory
    for h in started:
        await h.client.aclose()
        await h.app.stop()


@pytest.fixture
async def harness(make_harness: Callable[..., Any], db_url: str) -> Harness:
    h: Harness = await make_harness(db_url)
    return h


@dataclass
class Receiver:
    """A real aiohttp server on 127.0.0.1 recording requests and answering `statuses` in turn,
    each after its entry in `delays`."""

    url: str = ""
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    """Seconds to wait before answering, request by request (then none)."""
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), await request.read()))
        self.arrived.set()
        delay = self.delays.pop(0) if self.delays else 0.0
        if delay:
            await asyncio.sleep(delay)
        status = self.statuses.pop(0) if self.statuses else 200
        return web.Response(status=status, text="ok" if status < 300 else "nope")


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    app = web.Application()
    app.router.add_post("/hook", rec.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    rec.url = f"http://127.0.0.1:{port}/hook"
    yield rec
    await runner.cleanup()
