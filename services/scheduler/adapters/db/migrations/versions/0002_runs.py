"""runs and delivery attempts

Revision ID: 0002
Revises: 0001
Create Date: 2025-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scheduler.adapters.db.types import JSONText, UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

PLANNED = "trigger = 'schedule'"
DUE = "status IN ('pending', 'retrying')"
LEASED = "status = 'in_progress'"


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tenant_id", sa.String(200), nullable=False),
        sa.Column("schedule_id", sa.String(40), nullable=False),
        sa.Column("scheduled_for", UTCDateTime(), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("skip_reason", sa.String(32), nullable=True),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("lease_owner", sa.String(100), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("payload", JSONText(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index(
        "uq_runs_planned_occurrence",
        "runs",
        ["schedule_id", "scheduled_for"],
        unique=True,
        postgresql_where=sa.text(PLANNED),
        sqlite_where=sa.text(PLANNED),
    )
    op.create_index(
        "ix_runs_due",
        "runs",
        ["next_attempt_at"],
        postgresql_where=sa.text(DUE),
        sqlite_where=sa.text(DUE),
    )
    op.create_index(
        "ix_runs_lease",
        "runs",
        ["lease_expires_at"],
        postgresql_where=sa.text(LEASED),
        sqlite_where=sa.text(LEASED),
    )
    op.create_index("ix_runs_schedule_history", "runs", ["schedule_id", "scheduled_for", "id"])
    op.create_table(
        "delivery_attempts",
        sa.Column("run_id", sa.String(40), primary_key=True),
        sa.Column("number", sa.Integer(), primary_key=True),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error_kind", sa.String(32), nullable=True),
        sa.Column("error_message", sa.String(500), nullable=True),
        sa.Column("response_excerpt", sa.Text(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("delivery_attempts")
    op.drop_index("ix_runs_schedule_history", "runs")
    op.drop_index("ix_runs_lease", "runs")
    op.drop_index("ix_runs_due", "runs")
    op.drop_index("uq_runs_planned_occurrence", "runs")
    op.drop_table("runs")
