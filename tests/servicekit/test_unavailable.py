"""503 for outages, and an answer that names the database only when the database failed: the
same OSError from another dependency (a key fetch, a file) says a needed service is down."""

from __future__ import annotations

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from servicekit.data.database import DatabaseBounds, create_bounded_engine
from servicekit.http.unavailable import RETRY_AFTER_SECONDS, install_unavailable_handlers
from tests.support.processes import free_port


def _app() -> FastAPI:
    app = FastAPI()
    install_unavailable_handlers(app)
    # Nothing listens on this port: connecting is refused at once (a real asyncpg connect).
    closed = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nowhere"
    engine = create_bounded_engine(closed, DatabaseBounds(connect_timeout_seconds=2.0))

    @app.get("/database")
    async def database() -> None:
        async with engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    @app.get("/keys")
    async def keys() -> None:
        raise ConnectionRefusedError("key server refused")  # e.g. an outbound fetch

    @app.get("/bug")
    async def bug() -> None:
        raise ValueError("a bug")

    return app


async def _get(path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=_app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get(path)


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        ("/database", "the database is unavailable; retry later"),
        ("/keys", "a service this request needs is unavailable; retry later"),
    ],
)
async def test_outages_are_503_naming_what_failed(path: str, detail: str) -> None:
    r = await _get(path)
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
    assert r.json()["type"].endswith("/unavailable")
    assert r.json()["detail"] == detail


async def test_a_bug_is_not_an_outage() -> None:
    assert (await _get("/bug")).status_code == 500
