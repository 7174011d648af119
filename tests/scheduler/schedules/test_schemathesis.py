"""Property-based fuzzing of every operation in /openapi.json against a real uvicorn server on
loopback (SQLite): no generated input may produce a 5xx, and every error is problem+json."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings

from scheduler.adapters.db.migrate import upgrade
from scheduler.entrypoints.api.app import app_from_container
from tests.scheduler.conftest import StepClock, token
from tests.scheduler.schedules.conftest import make_container
from tests.support.processes import free_port


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db: Path = tmp_path_factory.mktemp("fuzz") / "scheduler.db"
    url = f"sqlite+aiosqlite:///{db}"
    asyncio.run(upgrade(url))
    app = app_from_container(make_container(url, StepClock()))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)  # waiting for the server thread, not for time
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def api_schema(live_server: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(live_server + "/openapi.json")


MAX_EXAMPLES = 25  # per operation: enough to hit every parameter's edges, fast on 2 cores
STATUSES: list[tuple[str, int]] = []  # what the fuzzer actually sent, to prove it ran


def _check(case: schemathesis.Case) -> None:
    response = case.call(headers={"Authorization": f"Bearer {token('fuzz-tenant')}"}, timeout=10)
    STATUSES.append((case.method, response.status_code))
    assert response.status_code < 500, (case.method, case.path, response.text[:500])
    if response.status_code >= 400:
        content_type = response.headers.get("content-type", [""])[0]
        assert content_type.startswith("application/problem+json"), (
            case.method,
            case.path,
            response.status_code,
            response.text[:300],
        )


@pytest.mark.slow
def test_no_server_errors(api_schema: schemathesis.BaseSchema) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 9  # every schedule route and the health routes are in the spec
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def run(case: schemathesis.Case) -> None:
            _check(case)

        run()
    assert len(STATUSES) >= 5 * len(operations)
