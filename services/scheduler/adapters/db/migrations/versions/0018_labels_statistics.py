"""Label filters are planned from exact label frequencies: schedules.labels STATISTICS 1000

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07

The planner estimates a `labels @> ...` filter from the column's most-common-values list and
histogram. At the default target (100) a tenant with hundreds of distinct label sets is
estimated from a 30,000-row sample's histogram bounds, which now and then puts a 0.2% label at
1%: the list then walks `ix_schedules_tenant_order` and filters 25,000 rows instead of reading
the GIN index (seen in CI at 100,000 schedules, about 1 ANALYZE in 60). A target of 1000 keeps
up to 1000 label sets with their frequencies, so a selective filter is estimated as selective.
SQLite has no per-column statistics target: nothing to do there.
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

TARGET = 1000


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE schedules ALTER COLUMN labels SET STATISTICS {TARGET}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE schedules ALTER COLUMN labels SET STATISTICS -1")
