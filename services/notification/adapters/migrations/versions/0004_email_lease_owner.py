"""email leases carry their owner

Revision ID: 0004
Revises: 0003

A claimed outbound email is leased to one sender's claim (`lease_owner`) until
`lease_expires_at`, renewed while its SMTP transaction runs; its result is written only while
the lease is still its own, so a sender that lost its lease cannot overwrite the new holder's
result. `next_attempt_at` is again only the time the email is due.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("outbound_emails", sa.Column("lease_owner", sa.String(length=80), nullable=True))
    op.add_column(
        "outbound_emails", sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("outbound_emails", schema=None) as batch_op:
        batch_op.drop_column("lease_expires_at")
        batch_op.drop_column("lease_owner")
