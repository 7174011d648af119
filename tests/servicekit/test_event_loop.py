"""servicekit.runtime.event_loop: uvloop where installed; SERVICE_EVENT_LOOP=asyncio picks the stock
loop."""

from __future__ import annotations

import asyncio

import pytest

from servicekit.runtime import event_loop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_run_is_on_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv(event_loop.ENV_VAR, raising=False)
    assert event_loop.run(_loop_module()).startswith("uvloop")
    assert event_loop.loop_name() == "uvloop"


def test_the_stock_loop_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV_VAR, "asyncio")
    assert event_loop.run(_loop_module()).startswith("asyncio")
    assert event_loop.loop_name() == "asyncio"
