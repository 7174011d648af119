"""Schedule versions: schedule_versions, runs.schedule_version

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-08

DESIGN.md §7b "Versions". `schedule_versions` holds one row per version of a schedule (primary
key (schedule_id, version); `superseded_at` is when the next one was written, null on the
latest), with who wrote it (`actor`, `source`), the definition in the API's shape, the state and
the changes. `ix_schedule_versions_superseded` is retention's: superseded versions, oldest first.

Every existing schedule (deleted ones too, until retention purges them) gets one row for its
current version, written by `system` through `api` with no changes, so every schedule has a
version to read and to restore. The rows are built here in batches of BATCH schedules (keyset on
id), from the columns as 0013 left them: the definition's flat field names, instants as RFC 3339.

`runs.schedule_version` is nullable without a default (no table rewrite on PostgreSQL): older
runs read back null, since which version planned them was never recorded.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from scheduler.adapters.db.types import JSONText, UTCDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

SUPERSEDED_SQL = "superseded_at IS NOT NULL"
BATCH = 1000

_JSON_FIELDS = ("target", "payload", "retry_policy", "breaker")
_INSTANTS = ("run_at", "start_at", "end_at")
_PLAIN_FIELDS = (
    "action",
    "cron",
    "description",
    "dst_policy",
    "jitter_seconds",
    "max_runs",
    "misfire_policy",
    "name",
    "overlap_policy",
    "timezone",
)


def _versions_table() -> list[Any]:
    return [
        sa.Column("schedule_id", sa.String(40), primary_key=True),
        sa.Column("version", sa.Integer(), primary_key=True),
        sa.Column("tenant_id", sa.String(200), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("superseded_at", UTCDateTime(), nullable=True),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("paused_reason", sa.String(200), nullable=True),
        sa.Column("definition", JSONText(), nullable=False),
        sa.Column("changes", JSONText(), nullable=False),
    ]


def upgrade() -> None:
    versions = op.create_table("schedule_versions", *_versions_table())
    op.create_index(
        "ix_schedule_versions_superseded",
        "schedule_versions",
        ["superseded_at"],
        postgresql_where=sa.text(SUPERSEDED_SQL),
        sqlite_where=sa.text(SUPERSEDED_SQL),
    )
    op.add_column("runs", sa.Column("schedule_version", sa.Integer(), nullable=True))
    _first_versions(versions)


def _first_versions(versions: sa.Table) -> None:
    """One version per existing schedule, its current one."""
    schedules = sa.table(
        "schedules",
        *(sa.column(n) for n in ("id", "tenant_id", "version", "state", "paused_reason")),
        *(sa.column(n) for n in _PLAIN_FIELDS),
        *(sa.column(n, JSONText()) for n in _JSON_FIELDS),
        *(sa.column(n, UTCDateTime()) for n in (*_INSTANTS, "updated_at", "deleted_at")),
        sa.column("labels", sa.JSON().with_variant(JSONB(), "postgresql")),
    )
    conn = op.get_bind()
    last = ""
    while True:
        rows = conn.execute(
            sa.select(schedules).where(schedules.c.id > last).order_by(schedules.c.id).limit(BATCH)
        ).all()
        if not rows:
            return
        conn.execute(sa.insert(versions), [_first_version(r._mapping) for r in rows])
        last = rows[-1]._mapping["id"]


def _first_version(m: Any) -> dict[str, Any]:
    definition = {n: m[n] for n in (*_PLAIN_FIELDS, *_JSON_FIELDS)}
    definition["labels"] = m["labels"] or {}
    for name in _INSTANTS:
        definition[name] = None if m[name] is None else _rfc3339(m[name])
    return {
        "schedule_id": m["id"],
        "version": m["version"],
        "tenant_id": m["tenant_id"],
        "at": m["updated_at"],
        "superseded_at": None,
        "actor": "system",
        "source": "api",
        "state": "deleted" if m["deleted_at"] is not None else m["state"],
        "paused_reason": m["paused_reason"],
        "definition": definition,
        "changes": [],
    }


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("schedule_version")
    op.drop_index("ix_schedule_versions_superseded", table_name="schedule_versions")
    op.drop_table("schedule_versions")
