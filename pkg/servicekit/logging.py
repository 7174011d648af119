"""Structured logs for both services.

Our code logs through the standard `logging` module (so libraries and our code share one stream);
structlog renders every record — ours, uvicorn's, SQLAlchemy's — as one JSON object per line on
stderr (or as aligned key=value text when stderr is a terminal). Values under sensitive-looking
keys (secret, token, authorization, password, signature, api key) are redacted by key name, a
second line of defence behind never passing secrets to a logger at all.

`LOG_FORMAT` (`json` | `console`) and `LOG_LEVEL` (`INFO`, ...) override the defaults.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_SENSITIVE = ("secret", "token", "authorization", "password", "signature", "api_key", "apikey")
REDACTED = "[redacted]"


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
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # uvicorn installs its own handlers unless told otherwise; send its records to ours.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
