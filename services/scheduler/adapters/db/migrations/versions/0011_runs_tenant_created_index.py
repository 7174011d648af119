"""max_runs_per_day counts the runs a tenant's UTC day created: an index on (tenant_id, created_at)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

The daily quota counts a tenant's non-skipped runs by the day they were created (the work done
that day), no longer by the day they are scheduled for: a backfill of past days spends today's
quota, and its count (and lock) is one day whatever the range it covers. `ix_runs_tenant_created`
(tenant_id, created_at) WHERE status <> 'skipped' makes that count a range of the tenant's day:
skipped runs (a tenant over its quota skips every later occurrence) are not in it.

On a PostgreSQL database that already holds many runs, create the index beforehand with
`CREATE INDEX CONCURRENTLY <same name> ...`: this migration uses IF NOT EXISTS and keeps it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# tables.COUNTED_SQL, written out: a migration never changes with the code.
COUNTED = "status <> 'skipped'"


def upgrade() -> None:
    op.create_index(
        "ix_runs_tenant_created",
        "runs",
        ["tenant_id", "created_at"],
        postgresql_where=sa.text(COUNTED),
        sqlite_where=sa.text(COUNTED),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_runs_tenant_created", "runs")
