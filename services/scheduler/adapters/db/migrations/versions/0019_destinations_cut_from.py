"""Flow control remembers the rate a destination pushed back at: destinations.cut_from

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07

`servicekit.flow` halves a destination's rate on a 429 and grows it back fast to just under
the rate it was cut from, then slowly (DESIGN.md §7b). `cut_from` is that rate; null in
existing rows, which then grow back slowly as before. Nullable without a default: no rewrite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("destinations", sa.Column("cut_from", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("destinations") as batch:
        batch.drop_column("cut_from")
