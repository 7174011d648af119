"""retention: indexes that make pruning O(rows deleted)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

The retention worker (service_layer/retention.py) deletes, in bounded batches:
- terminal runs by finished_at (a partial index over terminal runs only: the hot non-terminal
  rows never enter it);
- idempotency keys by created_at, and a purged schedule's keys by schedule_id;
- soft-deleted schedules by deleted_at (a partial index over deleted rows only).
processed_events(processed_at) exists since 0003.

On a PostgreSQL database that already holds many runs, CREATE INDEX blocks writes to the table
while it builds. To avoid that, create the same indexes beforehand with
`CREATE INDEX CONCURRENTLY <same name> ...`: this migration uses IF NOT EXISTS and keeps them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TERMINAL = "status IN ('succeeded', 'failed', 'skipped')"
DELETED = "deleted_at IS NOT NULL"


def upgrade() -> None:
    op.create_index(
        "ix_runs_terminal_finished",
        "runs",
        ["finished_at"],
        postgresql_where=sa.text(TERMINAL),
        sqlite_where=sa.text(TERMINAL),
        if_not_exists=True,
    )
    op.create_index(
        "ix_idempotency_keys_created", "idempotency_keys", ["created_at"], if_not_exists=True
    )
    op.create_index(
        "ix_idempotency_keys_schedule", "idempotency_keys", ["schedule_id"], if_not_exists=True
    )
    op.create_index(
        "ix_schedules_deleted",
        "schedules",
        ["deleted_at"],
        postgresql_where=sa.text(DELETED),
        sqlite_where=sa.text(DELETED),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_schedules_deleted", "schedules")
    op.drop_index("ix_idempotency_keys_schedule", "idempotency_keys")
    op.drop_index("ix_idempotency_keys_created", "idempotency_keys")
    op.drop_index("ix_runs_terminal_finished", "runs")
