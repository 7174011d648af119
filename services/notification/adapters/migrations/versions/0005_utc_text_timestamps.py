"""SQLite instants are stored as the scheduler stores them

Revision ID: 0005
Revises: 0004

Both services now share one column type (`servicekit.data.columns.UTCDateTime`). On SQLite it
writes `YYYY-MM-DDTHH:MM:SS.ffffff+00:00`, where notification's own type wrote naive
`YYYY-MM-DD HH:MM:SS.ffffff`. The type reads both, but they do not compare as text: a space
sorts before `T`, so a row left in the old form would compare earlier than any new instant of
its day, and be claimed, expired or purged early. Every stored instant is rewritten to the new
form. PostgreSQL stores `timestamptz` and needs nothing.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Every datetime column of the schema at 0004.
COLUMNS: dict[str, tuple[str, ...]] = {
    "alert_contacts": ("updated_at",),
    "alert_requests": ("created_at",),
    "subscriptions": (
        "previous_secret_expires_at",
        "failing_since",
        "created_at",
        "updated_at",
        "deleted_at",
    ),
    "notifications": ("created_at", "read_at"),
    "outbound_emails": ("next_attempt_at", "lease_expires_at", "created_at", "sent_at"),
    "webhook_deliveries": (
        "round_started_at",
        "next_attempt_at",
        "lease_expires_at",
        "created_at",
        "updated_at",
        "finished_at",
    ),
    "delivery_attempts": ("started_at",),
}


def _rewrite(sql: str) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table, columns in COLUMNS.items():
        for column in columns:
            op.execute(sql.format(table=table, c=column))


def upgrade() -> None:
    # SQLAlchemy's SQLite DATETIME always wrote the microseconds; 19 characters (whole seconds)
    # is accepted too, in case a row was written by hand.
    _rewrite(
        "UPDATE {table} SET {c} = substr({c}, 1, 10) || 'T' || substr({c}, 12)"
        " || CASE length({c}) WHEN 19 THEN '.000000+00:00' ELSE '+00:00' END"
        " WHERE length({c}) IN (19, 26) AND substr({c}, 11, 1) = ' '"
    )


def downgrade() -> None:
    _rewrite(
        "UPDATE {table} SET {c} = substr({c}, 1, 10) || ' ' || substr({c}, 12, 15)"
        " WHERE length({c}) = 32 AND substr({c}, 11, 1) = 'T' AND substr({c}, 27) = '+00:00'"
    )
