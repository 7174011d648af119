"""servicekit.event_loop: every entrypoint's loop is uvloop where installed; SERVICE_EVENT_LOOP=
asyncio picks the stock loop."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from servicekit import event_loop


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


def test_the_worker_entrypoint_runs_on_it() -> None:
    # The entrypoints call event_loop.run, not asyncio.run (a grep would miss a new one; this
    # checks the source of each).
    pytest.importorskip("uvloop")
    modules = [
        "scheduler.entrypoints.workers.__main__",
        "scheduler.entrypoints.cli_serve",
        "notification.entrypoints.cli_serve",
        "embedded.__main__",
    ]
    code = (
        "import importlib, inspect, sys\n"
        "for m in sys.argv[1:]:\n"
        "    src = inspect.getsource(importlib.import_module(m))\n"
        "    assert 'asyncio.run(' not in src and 'event_loop.run(' in src, m\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
