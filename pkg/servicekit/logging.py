"""Structured logs for both services.

Our code logs through the standard `logging` module (so libraries and our code share one stream);
structlog renders every record — ours, uvicorn's, SQLAlchemy's — as one JSON object per line on
stderr (or as aligned key=value text when stderr is a terminal). Values under sensitive-looking
keys (secret, token, authorization, password, signature, api key) are redacted by key name, a
second line of defence behind never passing secrets to a logger at all. Database errors are
rendered by class, SQLSTATE and statement, never by their message (`servicekit.data.safe_errors`):
the message can quote bound values.

`LOG_FORMAT` (`json` | `console`) and `LOG_LEVEL` (`INFO`, ...) override the defaults.

Records that can repeat once per connection or per accept() under attack or overload (asyncio's
"socket.accept() out of system resource", uvicorn's refusals, ours marked `extra={RATE_LIMITED:
True}`) pass at most once per message per interval; the next one that passes carries
`suppressed`, the count dropped in between.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

from servicekit.data.safe_errors import format_exception, scrub_database_errors

_SENSITIVE = ("secret", "token", "authorization", "password", "signature", "api_key", "apikey")
REDACTED = "[redacted]"

RATE_LIMITED = "rate_limited"
RATE_LIMIT_SECONDS = 10.0
# (logger, message prefix) of third-party records that repeat per accept or per request.
_NOISY: tuple[tuple[str, str], ...] = (
    ("asyncio", "socket.accept() out of system resource"),
    ("uvicorn.error", "Exceeded concurrency limit."),
    ("uvicorn.error", "Invalid HTTP request received."),
)


class RateLimitFilter(logging.Filter):
    """Lets the first record of each rate-limited message through per `interval_seconds` and
    counts the rest into the next one's `suppressed`. Other records pass untouched."""

    def __init__(
        self,
        interval_seconds: float = RATE_LIMIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.interval_seconds = interval_seconds
        self.clock = clock
        self._passed_at: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = _rate_limit_key(record)
        if key is None:
            return True
        now = self.clock()
        passed_at = self._passed_at.get(key)
        if passed_at is not None and now - passed_at < self.interval_seconds:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._passed_at[key] = now
        suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            record.suppressed = suppressed
        return True


def _rate_limit_key(record: logging.LogRecord) -> tuple[str, str] | None:
    if record.__dict__.pop(RATE_LIMITED, False):
        return (record.name, str(record.msg))
    msg = record.msg if isinstance(record.msg, str) else ""
    for name, prefix in _NOISY:
        if record.name == name and msg.startswith(prefix):
            return (name, prefix)
    return None


def _redact(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        if key != "event" and any(s in key.lower() for s in _SENSITIVE):
            event[key] = REDACTED
    return event


def configure_logging(
    *, service: str, json: bool | None = None, level: str | None = None, stream: Any = None
) -> None:
    """Route the root logger through structlog; idempotent (replaces the root handlers)."""
    stream = stream or sys.stderr
    fmt = os.environ.get("LOG_FORMAT", "").lower()
    if json is None:
        json = fmt == "json" or (fmt != "console" and not stream.isatty())
    level = (level or os.environ.get("LOG_LEVEL") or "INFO").upper()

    def add_service(_l: Any, _n: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event.setdefault("service", service)
        return event

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(),
        add_service,
        _redact,
        scrub_database_errors,  # a database error's text can quote bound values
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        pass_foreign_args=True,  # for scrub_database_errors, which pops them
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.ExceptionRenderer(format_exception),
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.addFilter(RateLimitFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # uvicorn installs its own handlers unless told otherwise; send its records to ours.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # Alembic (1.17 on) announces each of its plug-ins at info level when first imported, which
    # a serve that loads the migrator after configuring logs would print: not an operator's news.
    logging.getLogger("alembic.runtime.plugins").setLevel(max(root.level, logging.WARNING))
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
