"""A replay run names the run it replays: runs.replay_of

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

`POST .../runs/{run_id}/replay` makes a new run (trigger `replay`); `replay_of` keeps the
replayed run's id, so the API and the console can point from the copy back to its source. A
nullable column without a default: adding it rewrites no row on PostgreSQL, and older replays
read back null. Not a foreign key: retention deletes old runs before the replays of them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("replay_of", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("replay_of")
