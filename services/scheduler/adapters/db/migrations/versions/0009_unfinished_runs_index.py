"""unfinished runs per schedule: the overlap checks read them, not the schedule's history

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

The overlap checks ("is an earlier run of this schedule unfinished": the dispatcher's claim, the
settle's wake-up check and the planner's) read `ix_runs_schedule_history` (schedule_id,
scheduled_for, id), which holds every run: a schedule with a long history filtered all its
finished runs before its earliest scheduled_for. `ix_runs_schedule_unfinished` (schedule_id,
scheduled_for) WHERE status IN ('pending', 'in_progress', 'retrying') AND trigger <> 'backfill'
holds only the live unfinished runs (a few per schedule), so each check is a short index range.

On a PostgreSQL database that already holds many runs, create the index beforehand with
`CREATE INDEX CONCURRENTLY <same name> ...`: this migration uses IF NOT EXISTS and keeps it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# tables.UNFINISHED_LIVE_SQL, written out: a migration never changes with the code.
UNFINISHED_LIVE = "status IN ('pending', 'in_progress', 'retrying') AND trigger <> 'backfill'"


def upgrade() -> None:
    op.create_index(
        "ix_runs_schedule_unfinished",
        "runs",
        ["schedule_id", "scheduled_for"],
        postgresql_where=sa.text(UNFINISHED_LIVE),
        sqlite_where=sa.text(UNFINISHED_LIVE),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_runs_schedule_unfinished", "runs")
