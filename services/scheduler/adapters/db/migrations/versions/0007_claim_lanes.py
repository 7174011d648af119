"""claim lanes: live due runs per tenant (fair claims), backfill runs in their own lane

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

`ix_runs_due` (every due run) is replaced by two partial indexes that split it by lane, so a
backfill's thousands of old due runs never sit in front of live runs in the claim's index walk:
- `ix_runs_live_due` (next_attempt_at) and `ix_runs_live_due_tenant` (tenant_id,
  next_attempt_at, id) over due runs that are not backfill runs: the oldest live due run, and
  each tenant's oldest due runs (the tenant-fair claim, adapters/db/runs/claims.py);
- `ix_runs_backfill_due` (next_attempt_at) over due backfill runs: the lower-priority lane.
`runs.backfill_id` names the backfill request a backfill run belongs to;
`uq_runs_backfill_occurrence` (schedule_id, scheduled_for, backfill_id) WHERE trigger =
'backfill' makes a backfill one run per (schedule, occurrence, backfill request).

On a PostgreSQL database that already holds many runs, create the indexes beforehand with
`CREATE INDEX CONCURRENTLY <same name> ...`: this migration uses IF NOT EXISTS and keeps them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

DUE = "status IN ('pending', 'retrying')"
LIVE_DUE = "status IN ('pending', 'retrying') AND trigger <> 'backfill'"
BACKFILL_DUE = "status IN ('pending', 'retrying') AND trigger = 'backfill'"
BACKFILL = "trigger = 'backfill'"


def _partial(name: str, columns: list[str], where: str, *, unique: bool = False) -> None:
    op.create_index(
        name,
        "runs",
        columns,
        unique=unique,
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
        if_not_exists=True,
    )


def upgrade() -> None:
    op.add_column("runs", sa.Column("backfill_id", sa.String(40), nullable=True))
    _partial("ix_runs_live_due", ["next_attempt_at"], LIVE_DUE)
    _partial("ix_runs_live_due_tenant", ["tenant_id", "next_attempt_at", "id"], LIVE_DUE)
    _partial("ix_runs_backfill_due", ["next_attempt_at"], BACKFILL_DUE)
    _partial(
        "uq_runs_backfill_occurrence",
        ["schedule_id", "scheduled_for", "backfill_id"],
        BACKFILL,
        unique=True,
    )
    op.drop_index("ix_runs_due", "runs")


def downgrade() -> None:
    _partial("ix_runs_due", ["next_attempt_at"], DUE)
    op.drop_index("uq_runs_backfill_occurrence", "runs")
    op.drop_index("ix_runs_backfill_due", "runs")
    op.drop_index("ix_runs_live_due_tenant", "runs")
    op.drop_index("ix_runs_live_due", "runs")
    # No backfill before 0007: its runs go, their attempts first (nothing else would delete
    # them: retention deletes attempts with their run). Outbox rows are events, not run rows: kept.
    op.execute(
        "DELETE FROM delivery_attempts"
        " WHERE run_id IN (SELECT id FROM runs WHERE trigger = 'backfill')"
    )
    op.execute("DELETE FROM runs WHERE trigger = 'backfill'")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("backfill_id")
