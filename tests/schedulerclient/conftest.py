"""The client against the real APIs: both services built from their real bootstrap on SQLite.

- `client`: the blocking `Client` over real HTTP to uvicorn on loopback (module-scoped servers,
  a fresh tenant per test so tests do not see each other's schedules);
- `aclient`: `AsyncClient` over httpx's ASGI transport to the same kind of apps, in-process.

One HS256 key and one token with all four scopes serve both services, as `scheduler token` does.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from asgi_lifespan import LifespanManager
from pydantic import SecretStr
from starlette.types import ASGIApp

from authclient import AuthSettings, TokenVerifier, mint_token
from notification.config import NotificationSettings
from notification.entrypoints.runtime import NotificationApp, build_notification
from scheduler.adapters.db.migrate import upgrade
from scheduler.entrypoints.api.app import app_from_container
from schedulerclient import AsyncClient, Client
from servicekit.data.secretbox import generate_key
from tests.scheduler.conftest import HS256_KEY, StepClock
from tests.scheduler.schedules.conftest import make_container
from tests.support.threaded_server import serve_in_thread

SCOPES = ("schedules:read", "schedules:write", "notifications:read", "notifications:write")
SCHEDULER = "http://scheduler.test"
NOTIFICATION = "http://notification.test"
_tenants = itertools.count()


def token_for(tenant: str) -> str:
    return mint_token(HS256_KEY, tenant_id=tenant, scopes=SCOPES, ttl_seconds=3600)


@pytest.fixture
def tenant(request: pytest.FixtureRequest) -> str:
    return f"client-{next(_tenants)}-{request.node.name[:40]}"


def schedule_fields(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "name": "nightly-report",
        "cron": "0 3 * * 1-5",
        "timezone": "Africa/Addis_Ababa",
        "target": {"url": "https://example.com/hook", "headers": {"X-Team": "ops"}},
        "payload": {"report": "daily"},
    }
    fields.update(overrides)
    return fields


def _notification(tmp: Path) -> NotificationApp:
    settings = NotificationSettings(
        database_url=f"sqlite+aiosqlite:///{tmp}/notification.db",
        secret_key=SecretStr(generate_key()),
        var_dir=tmp / "var",
        webhook_allow_private_networks=False,
        kafka_bootstrap_servers=None,
        smtp_url=None,
        dev=True,  # migrate on start
    )
    verifier = TokenVerifier(AuthSettings(AUTH_HS256_KEY=SecretStr(HS256_KEY)))
    return build_notification(settings, verifier=verifier)


Cleanup = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Both services under uvicorn on loopback: (scheduler URL, notification URL)."""
    tmp = tmp_path_factory.mktemp("client-servers")
    url = f"sqlite+aiosqlite:///{tmp}/scheduler.db"
    asyncio.run(upgrade(url))

    async def scheduler() -> tuple[ASGIApp, Cleanup]:
        return app_from_container(make_container(url, StepClock())), _nothing

    async def notification() -> tuple[ASGIApp, Cleanup]:
        service = _notification(tmp)
        await service.start(run_workers=False)
        return service.asgi_app, service.stop

    with serve_in_thread(scheduler) as s, serve_in_thread(notification) as n:
        yield s, n


@pytest.fixture
def client(servers: tuple[str, str], tenant: str) -> Iterator[Client]:
    scheduler, notification = servers
    with Client(scheduler, token_for(tenant), notification_url=notification) as c:
        yield c


class HostRouter(httpx.AsyncBaseTransport):
    """Sends each request to the in-process app of its host."""

    def __init__(self, routes: dict[str, httpx.AsyncBaseTransport]) -> None:
        self.routes = routes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.routes[request.url.host].handle_async_request(request)


@pytest.fixture
async def aclient(tmp_path: Path, tenant: str) -> AsyncIterator[AsyncClient]:
    url = f"sqlite+aiosqlite:///{tmp_path}/scheduler.db"
    await upgrade(url)
    container = make_container(url, StepClock())
    scheduler = app_from_container(container)
    notification = _notification(tmp_path)
    await notification.start(run_workers=False)
    try:
        async with LifespanManager(scheduler):
            router = HostRouter(
                {
                    "scheduler.test": httpx.ASGITransport(app=scheduler),
                    "notification.test": httpx.ASGITransport(app=notification.asgi_app),
                }
            )
            async with AsyncClient(
                SCHEDULER, token_for(tenant), notification_url=NOTIFICATION, transport=router
            ) as c:
                yield c
    finally:
        await notification.stop()
