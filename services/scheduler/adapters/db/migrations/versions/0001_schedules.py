"""schedules, idempotency keys, outbox

Revision ID: 0001
Revises:
Create Date: 2025-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scheduler.adapters.db.types import JSONText, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tenant_id", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("cron", sa.String(200), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("target", JSONText(), nullable=False),
        sa.Column("payload", JSONText(), nullable=False),
        sa.Column("retry_policy", JSONText(), nullable=False),
        sa.Column("misfire_policy", sa.String(16), nullable=False),
        sa.Column("overlap_policy", sa.String(16), nullable=False),
        sa.Column("breaker", JSONText(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("paused_reason", sa.String(200), nullable=True),
        sa.Column("next_run_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("deleted_at", UTCDateTime(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("secret_ciphertext", sa.Text(), nullable=False),
        sa.Column("previous_secret_ciphertext", sa.Text(), nullable=True),
        sa.Column("previous_secret_expires_at", UTCDateTime(), nullable=True),
    )
    op.create_index(
        "ix_schedules_due",
        "schedules",
        ["next_run_at"],
        postgresql_where=sa.text("state = 'active' AND deleted_at IS NULL"),
        sqlite_where=sa.text("state = 'active' AND deleted_at IS NULL"),
    )
    op.create_index("ix_schedules_tenant_order", "schedules", ["tenant_id", "created_at", "id"])
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.String(200), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("schedule_id", sa.String(40), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "outbox",
        sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(64), nullable=False, unique=True),
        sa.Column("topic", sa.String(100), nullable=False),
        sa.Column("key", sa.String(100), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("sent_at", UTCDateTime(), nullable=True),
    )
    op.create_index(
        "ix_outbox_unsent",
        "outbox",
        ["id"],
        postgresql_where=sa.text("sent_at IS NULL"),
        sqlite_where=sa.text("sent_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_table("outbox")
    op.drop_table("idempotency_keys")
    op.drop_index("ix_schedules_tenant_order", "schedules")
    op.drop_index("ix_schedules_due", "schedules")
    op.drop_table("schedules")
