"""Flow control per destination: destinations, schedules.destination, runs.destination

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-09

DESIGN.md §7b "Flow control". `destinations` holds, per tenant and `host:port`, the tenant's
policy (`configured`, `max_in_flight`, `per_second`) and what the destination told us (the
hold, the adaptive rate) with the token bucket of the effective rate; a row without a policy
carries state only (a destination the tenant never configured that answered 429).

`schedules.destination` is the `host:port` of a webhook schedule's target (null for events),
written with the target; existing schedules get theirs here in batches of BATCH (keyset on
id). A claim copies it into `runs.destination`, so the in-flight count of a destination is an
index range of `ix_runs_destination_leased` (tenant_id, destination) WHERE status =
'in_progress'. Both columns are nullable without a default: no table rewrite on PostgreSQL.
`ix_schedules_destination` (tenant_id, destination) finds a held destination's schedules.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from alembic import op

from scheduler.adapters.db.types import JSONText, UTCDateTime

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

LEASED_SQL = "status = 'in_progress'"
BATCH = 1000


def upgrade() -> None:
    op.create_table(
        "destinations",
        sa.Column("tenant_id", sa.String(200), primary_key=True),
        sa.Column("destination", sa.String(261), primary_key=True),
        sa.Column("configured", sa.Boolean(), nullable=False),
        sa.Column("max_in_flight", sa.Integer(), nullable=True),
        sa.Column("per_second", sa.Float(), nullable=True),
        sa.Column("held_until", UTCDateTime(), nullable=True),
        sa.Column("current_rate", sa.Float(), nullable=True),
        sa.Column("rate_at", UTCDateTime(), nullable=True),
        sa.Column("cut_at", UTCDateTime(), nullable=True),
        sa.Column("tokens", sa.Float(), nullable=True),
        sa.Column("tokens_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )
    op.add_column("schedules", sa.Column("destination", sa.String(261), nullable=True))
    op.add_column("runs", sa.Column("destination", sa.String(261), nullable=True))
    op.create_index("ix_schedules_destination", "schedules", ["tenant_id", "destination"])
    op.create_index(
        "ix_runs_destination_leased",
        "runs",
        ["tenant_id", "destination"],
        postgresql_where=sa.text(LEASED_SQL),
        sqlite_where=sa.text(LEASED_SQL),
    )
    _fill_schedule_destinations()


def _destination(target: Any) -> str | None:
    """webhookdeliver.endpoint_key of the target's URL (copied: a migration is frozen code)."""
    if not isinstance(target, dict) or not isinstance(target.get("url"), str):
        return None
    parts = urlsplit(target["url"])
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port or (443 if parts.scheme == 'https' else 80)}"


def _fill_schedule_destinations() -> None:
    schedules = sa.table(
        "schedules", sa.column("id"), sa.column("target", JSONText()), sa.column("destination")
    )
    conn = op.get_bind()
    update = (
        sa.update(schedules)
        .where(schedules.c.id == sa.bindparam("b_id"))
        .values(destination=sa.bindparam("b_dest"))
    )
    last = ""
    while True:
        rows = conn.execute(
            sa.select(schedules.c.id, schedules.c.target)
            .where(schedules.c.id > last)
            .order_by(schedules.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        values = [{"b_id": r.id, "b_dest": _destination(r.target)} for r in rows]
        values = [v for v in values if v["b_dest"] is not None]
        if values:
            conn.execute(update, values)
        last = rows[-1].id


def downgrade() -> None:
    op.drop_index("ix_runs_destination_leased", table_name="runs")
    op.drop_index("ix_schedules_destination", table_name="schedules")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("destination")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("destination")
    op.drop_table("destinations")
