"""Logs are JSON lines with the service name, secrets under sensitive keys never appear, and a
flood of per-accept or per-connection records is rate-limited."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from servicekit.logging import RATE_LIMITED, REDACTED, RateLimitFilter, configure_logging


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_stdlib_records_render_as_json_with_secrets_redacted(restore_root: None) -> None:
    out = io.StringIO()
    configure_logging(service="scheduler", json=True, stream=out)
    logging.getLogger("scheduler.test").warning(
        "schedule created",
        extra={"schedule_id": "sch_1", "secret": "whsec_TOPSECRET", "auth_token": "eyJ.x.y"},
    )
    line = json.loads(out.getvalue().strip().splitlines()[-1])
    assert line["event"] == "schedule created"
    assert line["service"] == "scheduler"
    assert line["level"] == "warning"
    assert line["schedule_id"] == "sch_1"
    assert line["secret"] == REDACTED
    assert line["auth_token"] == REDACTED
    assert "TOPSECRET" not in out.getvalue()
    assert "eyJ.x.y" not in out.getvalue()


def test_exceptions_are_rendered(restore_root: None) -> None:
    out = io.StringIO()
    configure_logging(service="notification", json=True, stream=out)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("x").exception("failed")
    line = json.loads(out.getvalue().strip().splitlines()[-1])
    assert "RuntimeError: boom" in line["exception"]


def _accept_error(logger: logging.Logger) -> None:
    # What asyncio's default exception handler logs for each failed accept() (selector_events).
    logger.error(
        "socket.accept() out of system resource\nsocket: <socket fd=7>\n"
        "exception: OSError(24, 'Too many open files')",
        exc_info=OSError(24, "Too many open files"),
    )


def test_a_flood_of_accept_errors_logs_a_few_lines(restore_root: None) -> None:
    out = io.StringIO()
    configure_logging(service="scheduler", json=True, stream=out)
    asyncio_log = logging.getLogger("asyncio")
    for _ in range(10_000):
        _accept_error(asyncio_log)
    logging.getLogger("scheduler.test").error("an ordinary error")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    accept_lines = [x for x in lines if x["event"].startswith("socket.accept()")]
    assert 1 <= len(accept_lines) <= 3  # one per 10 s interval; the loop takes well under that
    assert lines[-1]["event"] == "an ordinary error"  # other records are untouched


def test_rate_limited_records_pass_once_per_interval_and_count_the_rest() -> None:
    now = [0.0]
    limiter = RateLimitFilter(interval_seconds=10.0, clock=lambda: now[0])
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s suppressed=%(suppressed)s"))
    handler.addFilter(limiter)
    logger = logging.getLogger("servicekit.test.ratelimit")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        for second in range(30):  # 30 s of 100 records a second
            now[0] = float(second)
            for _ in range(100):
                logger.info(
                    "http: closed a connection (%s s)",
                    2,
                    extra={RATE_LIMITED: True, "suppressed": 0},
                )
        logger.info("not limited %s", 1, extra={"suppressed": 0})
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    lines = out.getvalue().splitlines()
    assert lines == [
        "http: closed a connection (2 s) suppressed=0",
        "http: closed a connection (2 s) suppressed=999",
        "http: closed a connection (2 s) suppressed=999",
        "not limited 1 suppressed=0",
    ]
