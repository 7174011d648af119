"""flow control per destination: notification's copy of the tenants' policies and its state

Revision ID: 0006
Revises: 0005

`destinations` holds, per (tenant, destination host:port), the policy the tenant set through
the scheduler's `/v1/destinations` (copied from `destination-events`; `policy_at` is the time
of the event it came from, so an older event changes nothing) and the state the destination's
answers left (the hold, the adaptive rate, the token bucket), shared by every dispatcher
replica. `ix_webhook_deliveries_leased` finds the leased deliveries of a tenant, which the
claim counts as the destination's attempts in flight.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LEASED = sa.text("lease_owner IS NOT NULL")


def upgrade() -> None:
    op.create_table(
        "destinations",
        sa.Column("tenant_id", sa.String(length=200), nullable=False),
        sa.Column("destination", sa.String(length=261), nullable=False),
        sa.Column("configured", sa.Boolean(), nullable=False),
        sa.Column("max_in_flight", sa.Integer(), nullable=True),
        sa.Column("per_second", sa.Float(), nullable=True),
        sa.Column("policy_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("held_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("current_rate", sa.Float(), nullable=True),
        sa.Column("rate_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cut_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tokens", sa.Float(), nullable=True),
        sa.Column("tokens_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "destination", name="pk_destinations"),
    )
    op.create_index(
        "ix_webhook_deliveries_leased",
        "webhook_deliveries",
        ["tenant_id"],
        postgresql_where=LEASED,
        sqlite_where=LEASED,
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_leased", table_name="webhook_deliveries")
    op.drop_table("destinations")
