"""The API under test: migrated database, app from the real bootstrap, httpx over ASGI."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from pydantic import SecretStr

from authclient import AuthSettings
from scheduler.bootstrap import Container, bootstrap
from scheduler.config import SchedulerSettings
from scheduler.entrypoints.api.app import app_from_container
from tests.scheduler.conftest import HS256_KEY, SECRET_KEY, StepClock


def make_container(url: str, clock: StepClock, **overrides: object) -> Container:
    settings = SchedulerSettings(
        database_url=url,
        secret_key=SecretStr(SECRET_KEY),
        auth_hs256_key=SecretStr(HS256_KEY),
        webhook_allow_private_networks=False,
        **overrides,  # type: ignore[arg-type]
    )
    return bootstrap(
        settings,
        clock=clock,
        auth_settings=AuthSettings(AUTH_HS256_KEY=SecretStr(HS256_KEY)),
    )


@pytest.fixture
async def container(database_url: str, clock: StepClock) -> AsyncIterator[Container]:
    c = make_container(database_url, clock)
    yield c
    await c.aclose()


@pytest.fixture
async def app(container: Container) -> AsyncIterator[FastAPI]:
    application = app_from_container(container)
    async with LifespanManager(application):
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://scheduler.test") as c:
        yield c


def schedule_body(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": "nightly-report",
        "cron": "0 3 * * 1-5",
        "timezone": "Africa/Addis_Ababa",
        "action": "webhook",
        "target": {
            "url": "https://example.com/hook",
            "headers": {"X-Team": "ops"},
            "timeout_seconds": 10,
        },
        "payload": {"report": "daily"},
    }
    body.update(overrides)
    return body
