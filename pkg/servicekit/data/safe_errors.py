"""Database errors in logs without the values they were about.

A database error's text can quote what was bound to the statement: SQLAlchemy appends the
parameters (hidden by the engines' `hide_parameters`), and the server's own messages quote
values too (`invalid input syntax for type json ... Token "NaN"`, a unique violation's DETAIL,
a trigger's RAISE). So a database error (`servicekit.runtime.transient.is_database_error`) is
rendered by
what identifies it and never by its message: its class, SQLSTATE, constraint / table / column
names, and the statement text (placeholders only).

`servicekit.logging` uses `format_exception` for every traceback and `scrub_database_errors`
for log-call arguments, so `log.warning("... %s", exc)` and `log.exception(...)` are safe alike.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import MutableMapping
from types import TracebackType
from typing import Any

from servicekit.runtime.transient import is_database_error

_STATEMENT_CHARS = 300
_NAMES = ("constraint_name", "table_name", "column_name")
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def describe(exc: BaseException) -> str:
    """`str(exc)`, except for database errors: their identity without their message."""
    if not is_database_error(exc):
        return str(exc)
    parts = [type(exc).__name__]
    orig = getattr(exc, "orig", None)  # SQLAlchemy's wrapper: the driver's error
    inner = orig if isinstance(orig, BaseException) else exc
    if inner is not exc:
        parts.append(type(inner).__name__)
    driver = getattr(inner, "__cause__", None)  # asyncpg's error behind the adapter's
    for source in (inner, driver):
        if source is None:
            continue
        code = getattr(source, "sqlstate", None) or getattr(source, "pgcode", None)
        if isinstance(code, str):
            parts.append(f"sqlstate={code}")
            break
    for source in (inner, driver):
        for name in _NAMES:
            value = getattr(source, name, None)
            if isinstance(value, str) and value:
                parts.append(f"{name.removesuffix('_name')}={value}")
    statement = getattr(exc, "statement", None)
    if isinstance(statement, str) and statement:
        text = " ".join(statement.split())
        parts.append(
            f"[SQL: {text[:_STATEMENT_CHARS]}{'…' if len(text) > _STATEMENT_CHARS else ''}]"
        )
    return " ".join(dict.fromkeys(parts))  # once each, in order


def format_exception(exc_info: ExcInfo) -> str:
    """A traceback like `traceback.format_exception`'s, with database errors `describe`d."""
    exc = exc_info[1]
    chain: list[tuple[BaseException, str | None]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    link: str | None = None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, "direct cause"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, "context"
        else:
            current = None
    lines: list[str] = []
    for i, (e, _) in enumerate(reversed(chain)):
        if i:
            # The link that led from the later exception to this earlier one.
            how = chain[len(chain) - i][1]
            lines.append(
                "\nThe above exception was the direct cause of the following exception:\n\n"
                if how == "direct cause"
                else "\nDuring handling of the above exception, another exception occurred:\n\n"
            )
        if e.__traceback__ is not None:
            lines.append("Traceback (most recent call last):\n")
            lines.extend(traceback.format_tb(e.__traceback__))
        name = type(e).__qualname__
        module = type(e).__module__
        qualified = name if module in ("builtins", "__main__") else f"{module}.{name}"
        text = describe(e)
        lines.append(f"{qualified}: {text}\n" if text else f"{qualified}\n")
    return "".join(lines).rstrip("\n")


def scrub_database_errors(
    _logger: Any, _name: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: a standard-library record whose arguments hold a database error
    gets its message rendered again with that error `describe`d."""
    passed = event.pop("positional_args", None)  # the formatter's `pass_foreign_args`
    record = event.get("_record")
    if not isinstance(record, logging.LogRecord) or not isinstance(passed, tuple) or not passed:
        return event
    args = passed
    if not any(isinstance(a, BaseException) and is_database_error(a) for a in args):
        return event
    safe = tuple(
        describe(a) if isinstance(a, BaseException) and is_database_error(a) else a for a in args
    )
    try:
        event["event"] = str(record.msg) % safe
    except (TypeError, ValueError):
        event["event"] = f"{record.msg} ({', '.join(map(str, safe))})"
    return event
