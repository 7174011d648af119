"""outbox: partial index on sent_at for the retention of sent rows

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Retention deletes sent rows older than its cutoff: an index over sent rows only, so the
    # unsent backlog (ix_outbox_unsent) and this one stay disjoint and small.
    op.create_index(
        "ix_outbox_sent_at",
        "outbox",
        ["sent_at"],
        postgresql_where=sa.text("sent_at IS NOT NULL"),
        sqlite_where=sa.text("sent_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_outbox_sent_at", "outbox")
