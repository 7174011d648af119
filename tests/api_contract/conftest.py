"""Both services served by uvicorn on loopback, each on a fresh PostgreSQL database, with one
HS256 key: a token with every scope works against both, like `scheduler token` (docs/operations.md).

Each server runs in a thread with its own event loop (the asyncpg pool lives in that loop); the
tests talk to it over real HTTP. Module-scoped: one pair of servers per test module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from authclient import AuthSettings, TokenVerifier, mint_token
from notification.config import NotificationSettings
from notification.entrypoints.runtime import build_notification
from scheduler.adapters.db.migrate import upgrade
from scheduler.entrypoints.api.app import app_from_container
from servicekit.data.secretbox import generate_key
from tests.scheduler.conftest import HS256_KEY, StepClock
from tests.scheduler.schedules.conftest import make_container
from tests.support.pg import fresh_postgres_database
from tests.support.threaded_server import serve_in_thread as _serve

SCOPES = (
    "schedules:read",
    "schedules:write",
    "notifications:read",
    "notifications:write",
)


def bearer(tenant: str = "contract-tenant") -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(HS256_KEY, tenant_id=tenant, scopes=SCOPES)}"}


@dataclass
class Served:
    base_url: str
    openapi: dict[str, object]


@contextmanager
def _scheduler_server() -> Iterator[str]:
    async def build() -> tuple[FastAPI, Callable[[], Awaitable[None]]]:
        async def nothing() -> None:
            return None

        return app_from_container(make_container(url, StepClock())), nothing

    with _database("contract_sched") as url:
        asyncio.run(upgrade(url))
        with _serve(build) as base:
            yield base


@contextmanager
def _notification_server(tmp_path: Path) -> Iterator[str]:
    async def build() -> tuple[FastAPI, Callable[[], Awaitable[None]]]:
        settings = NotificationSettings(
            database_url=url,
            secret_key=SecretStr(generate_key()),
            var_dir=tmp_path / "var",
            webhook_allow_private_networks=False,
            kafka_bootstrap_servers=None,
            smtp_url=None,
            dev=True,  # migrate on start
        )
        verifier = TokenVerifier(AuthSettings(AUTH_HS256_KEY=SecretStr(HS256_KEY)))
        service = build_notification(settings, verifier=verifier)
        await service.start(run_workers=False)
        return service.asgi_app, service.stop

    with _database("contract_notif") as url, _serve(build) as base:
        yield base


@contextmanager
def _database(prefix: str) -> Iterator[str]:
    """A fresh PostgreSQL database for a module, created and dropped on a loop of its own."""
    manager = fresh_postgres_database(prefix)
    loop = asyncio.new_event_loop()
    try:
        url = loop.run_until_complete(manager.__aenter__())
        try:
            yield url
        finally:
            loop.run_until_complete(manager.__aexit__(None, None, None))
    finally:
        loop.close()


def _openapi(base_url: str) -> dict[str, object]:
    import httpx

    spec: dict[str, object] = httpx.get(base_url + "/openapi.json", timeout=10).json()
    return spec


@pytest.fixture(scope="module")
def scheduler_server() -> Iterator[Served]:
    with _scheduler_server() as base:
        yield Served(base, _openapi(base))


@pytest.fixture(scope="module")
def notification_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with _notification_server(tmp_path_factory.mktemp("notification")) as base:
        yield Served(base, _openapi(base))
