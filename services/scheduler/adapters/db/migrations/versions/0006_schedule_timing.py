"""schedule timing: DST policy, bounds, one-shot, run limit, jitter, description; runs.due_at

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

DESIGN.md §7a. Every new schedule column has a default that keeps today's behaviour (`shift`, no
bounds, no limit, no jitter), so existing rows need no backfill. `cron` becomes nullable (a
one-shot has `run_at` instead). `runs.due_at` is null on rows planned before jitter existed:
readers take scheduled_for then.

SQLite cannot drop NOT NULL in place: the schedules table is rebuilt (batch mode); its partial
indexes are dropped first and created again after, so their predicates survive the rebuild.

The downgrade leaves only rows 0005's code can read: a `completed` schedule (a state it does not
know) becomes `paused` with paused_reason `completed`, so it never fires again there (its bounds
are gone with their columns); a one-shot (no cron) cannot exist before 0006, so it is deleted
together with its runs, their attempts and its idempotency keys, leaving nothing that points at a
missing schedule.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scheduler.adapters.db.types import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

ACTIVE_LIVE = "state = 'active' AND deleted_at IS NULL"
DELETED = "deleted_at IS NOT NULL"


def _new_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("description", sa.String(1000), nullable=True),
        sa.Column("dst_policy", sa.String(16), nullable=False, server_default="shift"),
        sa.Column("start_at", UTCDateTime(), nullable=True),
        sa.Column("end_at", UTCDateTime(), nullable=True),
        sa.Column("max_runs", sa.Integer(), nullable=True),
        sa.Column("run_at", UTCDateTime(), nullable=True),
        sa.Column("jitter_seconds", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("planned_runs", sa.Integer(), nullable=False, server_default="0"),
    ]


def _partial_indexes(create: bool) -> None:
    if create:
        op.create_index(
            "ix_schedules_due",
            "schedules",
            ["next_run_at"],
            postgresql_where=sa.text(ACTIVE_LIVE),
            sqlite_where=sa.text(ACTIVE_LIVE),
        )
        op.create_index(
            "ix_schedules_deleted",
            "schedules",
            ["deleted_at"],
            postgresql_where=sa.text(DELETED),
            sqlite_where=sa.text(DELETED),
        )
    else:
        op.drop_index("ix_schedules_deleted", "schedules")
        op.drop_index("ix_schedules_due", "schedules")


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        _partial_indexes(create=False)
    with op.batch_alter_table("schedules") as batch:
        for column in _new_columns():
            batch.add_column(column)
        batch.alter_column("cron", existing_type=sa.String(200), nullable=True)
    if sqlite:
        _partial_indexes(create=True)
    op.add_column("runs", sa.Column("due_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "due_at")
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        _partial_indexes(create=False)
    op.execute(
        "UPDATE schedules SET state = 'paused', paused_reason = 'completed', next_run_at = NULL "
        "WHERE state = 'completed'"
    )
    op.execute(
        "DELETE FROM delivery_attempts WHERE run_id IN (SELECT id FROM runs WHERE schedule_id IN "
        "(SELECT id FROM schedules WHERE cron IS NULL))"
    )
    op.execute(
        "DELETE FROM runs WHERE schedule_id IN (SELECT id FROM schedules WHERE cron IS NULL)"
    )
    op.execute(
        "DELETE FROM idempotency_keys WHERE schedule_id IN "
        "(SELECT id FROM schedules WHERE cron IS NULL)"
    )
    op.execute("DELETE FROM schedules WHERE cron IS NULL")
    with op.batch_alter_table("schedules") as batch:
        batch.alter_column("cron", existing_type=sa.String(200), nullable=False)
        for column in reversed(_new_columns()):
            batch.drop_column(column.name)
    if sqlite:
        _partial_indexes(create=True)
