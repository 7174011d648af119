"""Schedules carry labels and a key: schedules.labels, schedules.key

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06

`labels` (DESIGN.md §7b) is jsonb on PostgreSQL with one GIN index (default jsonb_ops: it serves
both `@>`, the equality filter, and `?`, the presence filter), JSON text on SQLite. Existing rows
read `{}`: a constant default, so PostgreSQL adds the column without rewriting the table.
`key` is nullable; `uq_schedules_tenant_key` makes it unique among a tenant's live schedules (a
deleted schedule's key is free again), and the repository reads its violation as key-conflict.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

LIVE_KEY_SQL = "deleted_at IS NULL AND key IS NOT NULL"


def upgrade() -> None:
    labels_type = sa.JSON().with_variant(JSONB(), "postgresql")
    op.add_column(
        "schedules", sa.Column("labels", labels_type, nullable=False, server_default="{}")
    )
    op.add_column("schedules", sa.Column("key", sa.String(128), nullable=True))
    op.create_index(
        "uq_schedules_tenant_key",
        "schedules",
        ["tenant_id", "key"],
        unique=True,
        postgresql_where=sa.text(LIVE_KEY_SQL),
        sqlite_where=sa.text(LIVE_KEY_SQL),
    )
    op.create_index("ix_schedules_labels", "schedules", ["labels"], postgresql_using="gin")


def downgrade() -> None:
    op.drop_index("ix_schedules_labels", table_name="schedules")
    op.drop_index("uq_schedules_tenant_key", table_name="schedules")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("key")
        batch.drop_column("labels")
