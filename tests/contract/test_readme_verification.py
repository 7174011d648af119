"""The tenant guide's section on verifying signatures is code tenants copy: both of its receivers,
taken from docs/tenant-guide.md as written, accept a real delivery of our Deliverer and refuse a
wrong secret, a changed body and a timestamp more than 5 minutes away (either way). An edit of
the guide that breaks either fails here."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import webhookdeliver as wd
from tests.support.http import Recorded, recording_receiver, serve_on_loopback

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "tenant-guide.md"
NEW, OLD, OTHER = (wd.generate_secret() for _ in range(3))
AWAY_SECONDS = 301  # the guide refuses timestamps more than 5 minutes away, either way


def readme_block(marker: str) -> dict[str, Any]:
    """The one ```python block of the tenant guide that contains `marker`, executed."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"expected one guide python block with {marker!r}, got {len(found)}"
    namespace: dict[str, Any] = {}
    exec(compile(found[0], str(GUIDE), "exec"), namespace)
    return namespace


async def deliver(url: str, secrets: list[str], *, clock: Callable[[], float] = time.time) -> int:
    async with wd.Deliverer(allow_private_networks=True, clock=clock) as deliverer:
        result = await deliverer.deliver(
            wd.Delivery(
                url=url,
                body='{"report":"daily","ünïcode":"✓"}'.encode(),
                secrets=secrets,
                webhook_id="run_01JREADME00000000000000000",
                event_type="schedule.triggered",
                attempt=1,
            )
        )
    assert result.status_code is not None, result.error_message
    return result.status_code


@pytest.fixture
async def package_receiver() -> AsyncIterator[str]:
    """The guide's aiohttp handler with `webhookdeliver`, accepting NEW and OLD (a rotation)."""
    namespace = readme_block("wd.verify(")
    namespace["SECRETS"] = [NEW, OLD]
    app = web.Application()
    app.router.add_post("/hook", namespace["handle"])
    async with serve_on_loopback(app) as port:
        yield f"http://127.0.0.1:{port}/hook"


async def test_the_package_receiver_accepts_both_secrets_of_a_rotation(
    package_receiver: str,
) -> None:
    assert await deliver(package_receiver, [NEW]) == 200
    assert await deliver(package_receiver, [OLD]) == 200
    assert await deliver(package_receiver, [NEW, OLD]) == 200


async def test_the_package_receiver_refuses_another_secret_and_a_timestamp_too_far_away(
    package_receiver: str,
) -> None:
    assert await deliver(package_receiver, [OTHER]) == 401
    for away in (-AWAY_SECONDS, AWAY_SECONDS):  # a replay, and a sender's clock far ahead
        assert await deliver(package_receiver, [NEW], clock=lambda: time.time() + away) == 401


@pytest.fixture
async def recorded() -> AsyncIterator[tuple[str, Recorded]]:
    async with recording_receiver() as got:
        yield got


async def test_the_plain_python_verify_accepts_each_secret_of_a_real_delivery(
    recorded: tuple[str, Recorded],
) -> None:
    url, seen = recorded
    verify = readme_block("def verify(")["verify"]
    assert await deliver(url, [NEW, OLD]) == 200
    headers, body = seen.pop()
    assert verify(NEW, headers, body)
    assert verify(OLD, headers, body)  # the second entry of X-Signature
    assert not verify(OTHER, headers, body)
    assert not verify(NEW, headers, body + b" ")
    assert not verify(NEW, {**headers, "X-Webhook-Id": "run_01JOTHER0000000000000000000"}, body)


async def test_the_plain_python_verify_refuses_a_timestamp_too_far_away(
    recorded: tuple[str, Recorded],
) -> None:
    url, seen = recorded
    verify = readme_block("def verify(")["verify"]
    for away in (-AWAY_SECONDS, AWAY_SECONDS):
        assert await deliver(url, [NEW], clock=lambda: time.time() + away) == 200
        headers, body = seen.pop()
        assert not verify(NEW, headers, body)
