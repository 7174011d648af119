"""Table definitions (SQLAlchemy Core). Migrations are the source of truth for the schema; these
describe the same tables for queries, and tests check the two agree."""

from __future__ import annotations

import sqlalchemy as sa

from scheduler.adapters.db.types import JSONText, partial_index
from servicekit.data.columns import UTCDateTime

metadata = sa.MetaData()

# ix_schedules_due's predicate: queries that must use the index repeat it word for word.
ACTIVE_LIVE_SQL = "state = 'active' AND deleted_at IS NULL"

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a bigint identity.
BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("cron", sa.String(200), nullable=True),  # null for a one-shot (run_at)
    sa.Column("timezone", sa.String(64), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("target", JSONText(), nullable=False),
    sa.Column("payload", JSONText(), nullable=False),
    sa.Column("retry_policy", JSONText(), nullable=False),
    sa.Column("misfire_policy", sa.String(16), nullable=False),
    sa.Column("overlap_policy", sa.String(16), nullable=False),
    sa.Column("breaker", JSONText(), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("paused_reason", sa.String(200), nullable=True),
    sa.Column("next_run_at", UTCDateTime(), nullable=True),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    sa.Column("updated_at", UTCDateTime(), nullable=False),
    sa.Column("deleted_at", UTCDateTime(), nullable=True),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("consecutive_failures", sa.Integer(), nullable=False),
    sa.Column("secret_ciphertext", sa.Text(), nullable=False),
    sa.Column("previous_secret_ciphertext", sa.Text(), nullable=True),
    sa.Column("previous_secret_expires_at", UTCDateTime(), nullable=True),
    # Timing (migration 0006, DESIGN.md §7a).
    sa.Column("description", sa.String(1000), nullable=True),
    sa.Column("dst_policy", sa.String(16), nullable=False, server_default="shift"),
    sa.Column("start_at", UTCDateTime(), nullable=True),
    sa.Column("end_at", UTCDateTime(), nullable=True),
    sa.Column("max_runs", sa.Integer(), nullable=True),
    sa.Column("run_at", UTCDateTime(), nullable=True),
    sa.Column("jitter_seconds", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("planned_runs", sa.Integer(), nullable=False, server_default="0"),
)
# Due schedules cost O(due): a partial index on next_run_at over active, live rows only.
partial_index("ix_schedules_due", schedules.c.next_run_at, where=ACTIVE_LIVE_SQL)
sa.Index("ix_schedules_tenant_order", schedules.c.tenant_id, schedules.c.created_at, schedules.c.id)

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("tenant_id", sa.String(200), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("request_hash", sa.String(64), nullable=False),
    sa.Column("schedule_id", sa.String(40), nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
)

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(64), nullable=False, unique=True),
    sa.Column("topic", sa.String(100), nullable=False),
    sa.Column("key", sa.String(100), nullable=False),
    sa.Column("type", sa.String(100), nullable=False),
    sa.Column("payload", sa.Text(), nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    sa.Column("sent_at", UTCDateTime(), nullable=True),
)
sa.Index(
    "ix_outbox_unsent",
    outbox.c.id,
    postgresql_where=sa.text("sent_at IS NULL"),
    sqlite_where=sa.text("sent_at IS NULL"),
)
# Retention of sent rows (migration 0004; adapters/db/retention_store.py).
sa.Index(
    "ix_outbox_sent_at",
    outbox.c.sent_at,
    postgresql_where=sa.text("sent_at IS NOT NULL"),
    sqlite_where=sa.text("sent_at IS NOT NULL"),
)
