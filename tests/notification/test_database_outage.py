"""Notification on PostgreSQL behind a loopback proxy: a refused database and a hung one (the
link open and silent) answer data routes with 503 problem+json and Retry-After within the
bounds, /readyz turns 503 naming the overdue worker loops, and the service recovers by itself."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.notification.conftest import Harness, token
from tests.support.pg import fresh_postgres_database
from tests.support.processes import wait_until
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

BOUNDS: dict[str, Any] = {
    "db_connect_timeout_seconds": 1.0,
    "db_command_timeout_seconds": 2.0,
    "db_statement_timeout_seconds": 1.5,
    "db_pool_timeout_seconds": 2.0,
    "worker_step_timeout_seconds": 2.0,
}
# A stale pooled connection's ping (2 s) plus a new connect (1 s), with slack for a loaded machine.
REQUEST_BOUND_SECONDS = 10.0
WAIT = 30.0


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    p = TcpProxy("127.0.0.1", 5432)
    await p.start()
    yield p
    await p.stop()


@pytest.fixture
async def proxied_url(proxy: TcpProxy) -> AsyncIterator[str]:
    async with fresh_postgres_database("notif_outage") as url:
        proxy.upstream = ("127.0.0.1", make_url(url).port or 5432)
        yield make_url(url).set(port=proxy.port).render_as_string(hide_password=False)


async def timed_get(h: Harness, path: str) -> tuple[Any, float]:
    started = time.monotonic()
    resp = await h.client.get(path, headers=token("t1"))
    return resp, time.monotonic() - started


def assert_unavailable(resp: Any, seconds: float) -> None:
    assert resp.status_code == 503, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["type"].endswith("/unavailable")
    assert int(resp.headers["Retry-After"]) > 0
    assert seconds < REQUEST_BOUND_SECONDS


async def test_refused_and_hung_database_answer_503_and_readyz_names_overdue_loops(
    make_harness: Callable[..., Any], proxied_url: str, proxy: TcpProxy
) -> None:
    h: Harness = await make_harness(proxied_url, run_workers=True, **BOUNDS)
    assert (await h.client.get("/v1/subscriptions/", headers=token("t1"))).status_code == 200

    proxy.cut()  # connection refused (closed at once)
    assert_unavailable(*await timed_get(h, "/v1/subscriptions/"))
    proxy.restore()

    async def ready() -> bool:
        return (await h.client.get("/readyz")).status_code == 200

    await wait_until(ready, WAIT, "ready after the refusal")

    proxy.silence()  # hung: connections open, no byte forwarded
    assert_unavailable(*await timed_get(h, "/v1/subscriptions/"))

    async def overdue() -> bool:
        resp = await h.client.get("/readyz")
        return resp.status_code == 503 and bool(resp.json().get("overdue_loops"))

    await wait_until(overdue, WAIT, "readyz 503 naming the overdue loops")
    proxy.resume()
    await wait_until(ready, WAIT, "ready again once the database answers")
    assert (await h.client.get("/v1/subscriptions/", headers=token("t1"))).status_code == 200
