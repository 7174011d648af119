"""The ledger's periodic check: ledger_watermarks

Revision ID: 0017
Revises: 0014
Create Date: 2026-12-10

DESIGN.md §7b "Ledger": the worker counts the `missing` occurrences of the last hour into
`scheduler_ledger_missing_total` (service_layer/ledger_watch.py). `ledger_watermarks` holds, per
schedule, the instant up to which its occurrences are counted, so no occurrence is counted twice
across passes or replicas (a pass locks the rows it advances, FOR UPDATE SKIP LOCKED).
`ix_ledger_watermarks_checked` serves "the stalest watermarks first". A deleted schedule's row
goes once its last occurrences are counted.

(Revises 0014: the helpers of issue 27 add 0015 and 0016 in parallel; the integrator chains them.)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scheduler.adapters.db.types import UTCDateTime

revision = "0017"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_watermarks",
        sa.Column("schedule_id", sa.String(40), primary_key=True),
        sa.Column("tenant_id", sa.String(200), nullable=False),
        sa.Column("checked_until", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_ledger_watermarks_checked", "ledger_watermarks", ["checked_until"])


def downgrade() -> None:
    op.drop_index("ix_ledger_watermarks_checked", table_name="ledger_watermarks")
    op.drop_table("ledger_watermarks")
