"""The runs repository's hand-written SQLite: the multi-row statements of a settle
(`Settle._settle_leased_sqlite`), qmark placeholders, chunked under SQLite's parameter limit."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TypeVar

_T = TypeVar("_T")
# Rows per SQLite multi-row statement: at most 10 x 500 parameters, under SQLite's limit (32,766).
SQLITE_CHUNK = 500
# The lease compare-and-set on SQLite (3.35+: UPDATE FROM, RETURNING); the VALUES columns are
# column1..column10: id, owner, then the state columns in the order
# `Settle._settle_leased_sqlite` lists.
UPDATE_OWNED = (
    "UPDATE runs SET status = v.column3, skip_reason = v.column4, attempt_count = v.column5, "
    "next_attempt_at = v.column6, started_at = v.column7, finished_at = v.column8, "
    "lease_owner = v.column9, lease_expires_at = v.column10 FROM (VALUES {}) AS v "
    "WHERE runs.id = v.column1 AND runs.lease_owner = v.column2 AND runs.status = 'in_progress' "
    "RETURNING id"
)
ATTEMPT_INSERT = (
    "INSERT INTO delivery_attempts (run_id, number, started_at, duration_ms, status_code, "
    "error_kind, error_message, response_excerpt) VALUES {}"
)
OUTBOX_INSERT = (
    "INSERT INTO outbox (event_id, topic, key, type, payload, created_at) VALUES {} "
    "ON CONFLICT DO NOTHING"
)


def chunks(items: Sequence[_T]) -> list[Sequence[_T]]:
    return [items[i : i + SQLITE_CHUNK] for i in range(0, len(items), SQLITE_CHUNK)]


@functools.lru_cache(maxsize=64)
def multi_row(template: str, rows: int, columns: int) -> str:
    """`template` with `rows` groups of `columns` qmark placeholders (SQLite)."""
    one = "(" + ", ".join("?" * columns) + ")"
    return template.format(", ".join([one] * rows))
