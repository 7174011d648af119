"""Both APIs as real processes on PostgreSQL reached through a loopback proxy, with the default
database bounds: the pool is warmed by a few requests, then the link hangs (open, silent). A list
request must still be answered, with 503 problem+json and Retry-After, by the request deadline
(`*_HTTP_REQUEST_TIMEOUT_SECONDS`, 8 s by default) instead of waiting out the driver's
round-trip bound (20 s) and the rollback behind it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy.engine import make_url

from authclient import mint_token
from servicekit.data.secretbox import generate_key
from tests.support.pg import fresh_postgres_database
from tests.support.processes import ServiceProcess
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

KEY = "test-hs256-key-" + "h" * 40
# The client's patience: the server's bound is 8 s by construction, the rest is slack for a
# loaded 2-core machine. Without the deadline no answer came within this.
ANSWER_WITHIN_SECONDS = 19.0
WARM_REQUESTS = 3

SERVICES = {
    "scheduler": (
        "scheduler.entrypoints.cli",
        ("serve", "--role", "api", "--dev", "--port", "{port}"),
        "SCHEDULER_",
        "/v1/schedules/",
        ("schedules:read",),
    ),
    "notification": (
        "notification.entrypoints.cli",
        ("serve", "--dev", "--port", "{port}"),
        "NOTIFICATION_",
        "/v1/subscriptions/",
        ("notifications:read",),
    ),
}


async def get(url: str, headers: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    timeout = aiohttp.ClientTimeout(total=ANSWER_WITHIN_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as s, s.get(url, headers=headers) as r:
        return r.status, await r.text(), dict(r.headers)


@pytest.mark.parametrize("service", list(SERVICES))
async def test_a_hung_database_is_a_503_by_the_request_deadline(
    service: str, tmp_path: Path
) -> None:
    module, args, prefix, path, scopes = SERVICES[service]
    headers = {"Authorization": f"Bearer {mint_token(KEY, tenant_id='t1', scopes=list(scopes))}"}
    async with fresh_postgres_database(f"hung_{service[:5]}") as url:
        proxy = TcpProxy("127.0.0.1", make_url(url).port or 5432)
        await proxy.start()
        proxied = make_url(url).set(host="127.0.0.1", port=proxy.port)
        process = ServiceProcess(
            module,
            tmp_path,
            env={
                f"{prefix}DATABASE_URL": proxied.render_as_string(hide_password=False),
                f"{prefix}SECRET_KEY": generate_key(),
                "AUTH_HS256_KEY": KEY,
            },
            args=args,
            name=service,
            strip_env_prefixes=(prefix, "AUTH_", "KAFKA_"),
        )
        try:
            await process.start()
            for _ in range(WARM_REQUESTS):  # pooled connections, used a moment ago: no ping
                status, text, _ = await get(process.base_url + path, headers)
                assert status == 200, text
            proxy.silence()
            try:
                status, text, answer = await get(process.base_url + path, headers)
            except TimeoutError:
                pytest.fail(f"no answer within {ANSWER_WITHIN_SECONDS} s of the hang")
            assert status == 503, text
            assert answer["Content-Type"].startswith("application/problem+json")
            assert '"/unavailable' in text or "/unavailable" in text
            assert int(answer["Retry-After"]) > 0
        finally:
            await process.aclose()
            await asyncio.wait_for(proxy.stop(), 30)
