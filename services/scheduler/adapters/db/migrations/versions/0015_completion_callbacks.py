"""Completion callbacks: schedules.completion, the runs' awaiting and completion columns, the
attempts' completion columns

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

DESIGN.md §7b "Completion". `schedules.completion` is the policy as JSON text (null on older rows
reads as `{"mode": "response"}`). A run awaiting its completion call is in_progress without a
lease and with `completion_deadline`; `ix_runs_completion_deadline` holds those runs alone (the
column is cleared when the awaiting ends), so the watchdog's probe is O(overdue runs).
`completion_token_hash` is the SHA-256 of the token of attempt `completion_attempt` (the token is
never stored). Every column is nullable without a default (`too_fast` has a constant one), so
PostgreSQL adds them without rewriting a table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scheduler.adapters.db.types import JSONText, UTCDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

AWAITING_SQL = "completion_deadline IS NOT NULL"


def upgrade() -> None:
    op.add_column("schedules", sa.Column("completion", JSONText(), nullable=True))
    op.add_column("runs", sa.Column("completion_deadline", UTCDateTime(), nullable=True))
    op.add_column("runs", sa.Column("completion_attempt", sa.Integer(), nullable=True))
    op.add_column("runs", sa.Column("completion_token_hash", sa.String(64), nullable=True))
    op.add_column("runs", sa.Column("completion_status", sa.String(16), nullable=True))
    op.add_column("runs", sa.Column("completed_at", UTCDateTime(), nullable=True))
    op.add_column("runs", sa.Column("completion_detail", sa.Text(), nullable=True))
    op.add_column("runs", sa.Column("completion_output", JSONText(), nullable=True))
    op.add_column(
        "runs",
        sa.Column("too_fast", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_index(
        "ix_runs_completion_deadline",
        "runs",
        ["completion_deadline"],
        postgresql_where=sa.text(AWAITING_SQL),
        sqlite_where=sa.text(AWAITING_SQL),
    )
    op.add_column("delivery_attempts", sa.Column("completed_at", UTCDateTime(), nullable=True))
    op.add_column("delivery_attempts", sa.Column("completion_detail", sa.Text(), nullable=True))
    op.add_column("delivery_attempts", sa.Column("completion_output", JSONText(), nullable=True))


def downgrade() -> None:
    op.drop_index("ix_runs_completion_deadline", table_name="runs")
    with op.batch_alter_table("delivery_attempts") as batch:
        for name in ("completed_at", "completion_detail", "completion_output"):
            batch.drop_column(name)
    with op.batch_alter_table("runs") as batch:
        for name in (
            "completion_deadline",
            "completion_attempt",
            "completion_token_hash",
            "completion_status",
            "completed_at",
            "completion_detail",
            "completion_output",
            "too_fast",
        ):
            batch.drop_column(name)
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("completion")
