"""tenant state projections: suspension, entitlements, processed events

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scheduler.adapters.db.types import JSONText, UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_status",
        sa.Column("tenant_id", sa.String(200), primary_key=True),
        sa.Column("suspended", sa.Boolean(), nullable=False),
        sa.Column("status_time", UTCDateTime(), nullable=False),
        sa.Column("event_id", sa.String(100), nullable=False),
        sa.Column("suspended_since", UTCDateTime(), nullable=True),
        sa.Column("applied_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_tenant_status_applied", "tenant_status", ["applied_at"])
    op.create_table(
        "tenant_entitlements",
        sa.Column("tenant_id", sa.String(200), primary_key=True),
        sa.Column("limits", JSONText(), nullable=False),
        sa.Column("event_time", UTCDateTime(), nullable=False),
        sa.Column("event_id", sa.String(100), nullable=False),
        sa.Column("applied_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_tenant_entitlements_applied", "tenant_entitlements", ["applied_at"])
    op.create_table(
        "processed_events",
        sa.Column("event_id", sa.String(100), primary_key=True),
        sa.Column("processed_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_processed_events_at", "processed_events", ["processed_at"])
    # max_runs_per_day counts a tenant's runs in one day: O(that day's runs), not O(table).
    op.create_index("ix_runs_tenant_scheduled", "runs", ["tenant_id", "scheduled_for"])


def downgrade() -> None:
    op.drop_index("ix_runs_tenant_scheduled", "runs")
    op.drop_index("ix_processed_events_at", "processed_events")
    op.drop_table("processed_events")
    op.drop_index("ix_tenant_entitlements_applied", "tenant_entitlements")
    op.drop_table("tenant_entitlements")
    op.drop_index("ix_tenant_status_applied", "tenant_status")
    op.drop_table("tenant_status")
