"""A run kept back by flow control does not spend its retry budget: runs.held_seconds

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07

DESIGN.md §7b: a held run is not a failed attempt and does not count toward
`max_retry_duration_seconds`. A first attempt kept back has not started (its `started_at` stays
unset), but a run retrying after an attempt has, so the seconds flow control keeps it back (a
hold, a destination's rate or in-flight limit) add up here and the retry budget leaves them
out. Null on existing rows (none held). Nullable without a default: no table rewrite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("held_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("held_seconds")
