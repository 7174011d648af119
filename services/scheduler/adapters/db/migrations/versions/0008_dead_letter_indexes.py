"""dead-letter indexes: failed runs per tenant and per schedule, newest first

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

`?status=failed` (the dead-letter list) otherwise walks the tenant's (or schedule's) whole
history newest first, filtering by status: a tenant with millions of succeeded runs reads them
all before its first failed one. Two partial indexes over the failed runs only (small: they are
the exceptions), in the history's order:
- `ix_runs_tenant_failed` (tenant_id, scheduled_for, id) WHERE status = 'failed':
  `GET /v1/schedules/-/runs?status=failed`;
- `ix_runs_schedule_failed` (schedule_id, scheduled_for, id) WHERE status = 'failed':
  `GET /v1/schedules/{id}/runs?status=failed`.

On a PostgreSQL database that already holds many runs, create the indexes beforehand with
`CREATE INDEX CONCURRENTLY <same name> ...`: this migration uses IF NOT EXISTS and keeps them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

FAILED = "status = 'failed'"


def _failed(name: str, first: str) -> None:
    op.create_index(
        name,
        "runs",
        [first, "scheduled_for", "id"],
        postgresql_where=sa.text(FAILED),
        sqlite_where=sa.text(FAILED),
        if_not_exists=True,
    )


def upgrade() -> None:
    _failed("ix_runs_tenant_failed", "tenant_id")
    _failed("ix_runs_schedule_failed", "schedule_id")


def downgrade() -> None:
    op.drop_index("ix_runs_schedule_failed", "runs")
    op.drop_index("ix_runs_tenant_failed", "runs")
