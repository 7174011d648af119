"""The notification database schema (SQLAlchemy Core). Migrations mirror it."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from servicekit.data.columns import UTCDateTime

# The statuses a delivery can be claimed in (domain.deliveries.DUE_STATES).
DUE_STATUSES_SQL = "status IN ('pending', 'retrying')"
LEASED_SQL = "lease_owner IS NOT NULL"

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

subscriptions = Table(
    "subscriptions",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(200), nullable=False),
    Column("url", Text, nullable=False),
    Column("event_types", JSON, nullable=False),
    Column("description", Text, nullable=True),
    Column("enabled", Boolean, nullable=False),
    Column("disabled_reason", String(40), nullable=True),
    Column("secret_enc", Text, nullable=False),
    Column("previous_secret_enc", Text, nullable=True),
    Column("previous_secret_expires_at", UTCDateTime, nullable=True),
    # Endpoint health streak (domain/deliveries.py).
    Column("failing_since", UTCDateTime, nullable=True),
    Column("consecutive_failures", Integer, nullable=False, default=0),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("deleted_at", UTCDateTime, nullable=True),
    Index("ix_subscriptions_tenant_created", "tenant_id", "created_at", "id"),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(200), nullable=False),
    Column("subscription_id", String(40), ForeignKey("subscriptions.id"), nullable=False),
    Column("event_id", String(200), nullable=False),
    Column("event_type", String(200), nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column("status", String(20), nullable=False),
    Column("attempt_count", Integer, nullable=False),
    # The retry budget restarts on replay: attempts and elapsed time count from round start.
    Column("round_attempts", Integer, nullable=False),
    Column("round_started_at", UTCDateTime, nullable=True),
    Column("next_attempt_at", UTCDateTime, nullable=True),
    # The lease of the dispatcher claim attempting it (migration 0003): only the owner's
    # completion is written; an expired lease can be claimed by another dispatcher.
    Column("lease_owner", String(80), nullable=True),
    Column("lease_expires_at", UTCDateTime, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    # The fan-out invariant: one delivery per (event, subscription), whatever re-reads happen.
    UniqueConstraint("event_id", "subscription_id", name="uq_webhook_deliveries_event_sub"),
    # The claim walks due deliveries in next_attempt_at order (migration 0003).
    Index(
        "ix_webhook_deliveries_due_at",
        "next_attempt_at",
        postgresql_where=text(DUE_STATUSES_SQL),
        sqlite_where=text(DUE_STATUSES_SQL),
    ),
    Index("ix_webhook_deliveries_sub_created", "subscription_id", "created_at", "id"),
    # Retention (migration 0002): finished deliveries, oldest first.
    Index("ix_webhook_deliveries_finished", "finished_at"),
    # Flow control (migration 0006): a tenant's leased deliveries are its attempts in flight.
    Index(
        "ix_webhook_deliveries_leased",
        "tenant_id",
        postgresql_where=text(LEASED_SQL),
        sqlite_where=text(LEASED_SQL),
    ),
)

# Flow control per (tenant, destination host:port) (migration 0006, domain/destinations.py):
# the tenant's policy as the scheduler published it (`configured`: one is set; `policy_at`: the
# time of the event it came from) and the state the destination's answers left, shared by every
# dispatcher replica (servicekit.flow.FlowState's columns).
destinations = Table(
    "destinations",
    metadata,
    Column("tenant_id", String(200), primary_key=True),
    Column("destination", String(261), primary_key=True),
    Column("configured", Boolean, nullable=False),
    Column("max_in_flight", Integer, nullable=True),
    Column("per_second", Float, nullable=True),
    Column("policy_at", UTCDateTime, nullable=True),
    Column("held_until", UTCDateTime, nullable=True),
    Column("current_rate", Float, nullable=True),
    Column("rate_at", UTCDateTime, nullable=True),
    Column("cut_at", UTCDateTime, nullable=True),
    Column("cut_from", Float, nullable=True),  # migration 0007
    Column("tokens", Float, nullable=True),
    Column("tokens_at", UTCDateTime, nullable=True),
    Column("updated_at", UTCDateTime, nullable=False),
)

delivery_attempts = Table(
    "delivery_attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("delivery_id", String(40), ForeignKey("webhook_deliveries.id"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("duration_ms", Integer, nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("error_kind", String(40), nullable=True),
    Column("error_message", Text, nullable=True),
    Column("response_excerpt", Text, nullable=True),
    UniqueConstraint("delivery_id", "number", name="uq_delivery_attempts_delivery_number"),
)

alert_contacts = Table(
    "alert_contacts",
    metadata,
    Column("tenant_id", String(200), primary_key=True),
    Column("emails", JSON, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

# One row per alert request handled: the dedup key (event id) for both channels.
alert_requests = Table(
    "alert_requests",
    metadata,
    Column("id", String(200), primary_key=True),
    Column("tenant_id", String(200), nullable=False),
    Column("template", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_alert_requests_created", "created_at"),  # retention
)

notifications = Table(
    "notifications",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(200), nullable=False),
    Column("request_id", String(200), ForeignKey("alert_requests.id"), nullable=False),
    Column("template", String(64), nullable=False),
    Column("title", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("data", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("read_at", UTCDateTime, nullable=True),
    UniqueConstraint("request_id", name="uq_notifications_request"),
    Index("ix_notifications_tenant_created", "tenant_id", "created_at", "id"),
    Index("ix_notifications_created", "created_at"),  # retention
)

outbound_emails = Table(
    "outbound_emails",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(200), nullable=False),
    Column("request_id", String(200), ForeignKey("alert_requests.id"), nullable=False),
    Column("recipients", JSON, nullable=False),
    Column("subject", Text, nullable=False),
    Column("text_body", Text, nullable=False),
    Column("html_body", Text, nullable=False),
    Column("status", String(20), nullable=False),  # pending | sent | failed
    Column("attempt_count", Integer, nullable=False),
    Column("next_attempt_at", UTCDateTime, nullable=True),
    # The lease of the sender claim attempting it (migration 0004), as on webhook_deliveries.
    Column("lease_owner", String(80), nullable=True),
    Column("lease_expires_at", UTCDateTime, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("sent_at", UTCDateTime, nullable=True),
    UniqueConstraint("request_id", name="uq_outbound_emails_request"),
    Index("ix_outbound_emails_due", "status", "next_attempt_at"),
    Index("ix_outbound_emails_created", "created_at"),  # retention
)
