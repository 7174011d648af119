"""Logs are JSON lines with the service name, and secrets under sensitive keys never appear."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from servicekit.logging import REDACTED, configure_logging


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
