"""No bound SQL parameter reaches a log line: a real failing insert on servicekit's engine,
logged as a traceback and as an argument, shows the error's identity and never the values."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from servicekit.data.database import DatabaseBounds, create_bounded_engine
from servicekit.logging import configure_logging

PLANTED = "planted-credential-5b9e"


@pytest.fixture
def captured() -> io.StringIO:
    stream = io.StringIO()
    configure_logging(service="test", json=True, stream=stream)
    return stream


async def failing_insert(engine: AsyncEngine) -> sa.exc.DBAPIError:
    async with engine.begin() as conn:
        await conn.execute(sa.text("CREATE TABLE t (id INTEGER PRIMARY KEY, secret TEXT)"))
        await conn.execute(sa.text("INSERT INTO t VALUES (1, 'x')"))
    try:
        async with engine.begin() as conn:  # a duplicate key, carrying the planted value
            await conn.execute(sa.text("INSERT INTO t VALUES (1, :s)"), {"s": PLANTED})
    except sa.exc.DBAPIError as exc:
        return exc
    raise AssertionError("the insert should have failed")


async def test_a_failing_insert_logs_no_bound_parameter(
    tmp_path: Path, captured: io.StringIO
) -> None:
    engine = create_bounded_engine(f"sqlite+aiosqlite:///{tmp_path / 't.db'}", DatabaseBounds())
    try:
        exc = await failing_insert(engine)
    finally:
        await engine.dispose()
    assert PLANTED not in str(exc)  # hide_parameters: not in SQLAlchemy's own message
    log = logging.getLogger("servicekit.test")
    try:
        raise RuntimeError("writing the batch failed") from exc
    except RuntimeError:
        log.exception("writer: cannot write")
    log.warning("planner: database unavailable (%s); retrying", exc)
    out = captured.getvalue()
    assert PLANTED not in out
    assert "IntegrityError" in out  # the error itself is logged
    assert "[SQL: INSERT INTO t VALUES (1, ?)]" in out  # with its statement, placeholders only
    assert "writing the batch failed" in out  # other exceptions keep their message
    assert "planner: database unavailable (IntegrityError" in out
