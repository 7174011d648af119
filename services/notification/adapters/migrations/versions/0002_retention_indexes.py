"""retention: indexes that make pruning O(rows deleted)

Revision ID: 0002
Revises: 0001

service_layer/retention.py deletes finished deliveries by finished_at, and inbox notifications,
finished emails and alert requests by created_at, oldest first in bounded batches. On a large
PostgreSQL database, create these beforehand with CREATE INDEX CONCURRENTLY (same names) to
avoid blocking writes while they build: IF NOT EXISTS keeps them.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "ix_webhook_deliveries_finished": ("webhook_deliveries", ["finished_at"]),
    "ix_notifications_created": ("notifications", ["created_at"]),
    "ix_outbound_emails_created": ("outbound_emails", ["created_at"]),
    "ix_alert_requests_created": ("alert_requests", ["created_at"]),
}


def upgrade() -> None:
    for name, (table, columns) in INDEXES.items():
        op.create_index(name, table, columns, unique=False, if_not_exists=True)


def downgrade() -> None:
    for name, (table, _columns) in INDEXES.items():
        op.drop_index(name, table_name=table)
