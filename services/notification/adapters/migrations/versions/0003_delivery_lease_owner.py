"""delivery leases carry their owner; the due index is partial

Revision ID: 0003
Revises: 0002

A claimed delivery is leased to one dispatcher's claim (`lease_owner`) until
`lease_expires_at`; a completion is written only while the lease is still its own, so a
dispatcher that lost its lease cannot overwrite the new holder's result. The claim walks the
due deliveries in next_attempt_at order on a partial index of the due ones, and stops at its
limit instead of sorting every due row.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


DUE = sa.text("status IN ('pending', 'retrying')")


def upgrade() -> None:
    op.alter_column("webhook_deliveries", "locked_until", new_column_name="lease_expires_at")
    op.add_column(
        "webhook_deliveries", sa.Column("lease_owner", sa.String(length=80), nullable=True)
    )
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.create_index(
        "ix_webhook_deliveries_due_at",
        "webhook_deliveries",
        ["next_attempt_at"],
        postgresql_where=DUE,
        sqlite_where=DUE,
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_due_at", table_name="webhook_deliveries")
    op.create_index(
        "ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"]
    )
    op.drop_column("webhook_deliveries", "lease_owner")
    op.alter_column("webhook_deliveries", "lease_expires_at", new_column_name="locked_until")
