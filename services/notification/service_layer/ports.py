"""What the service layer needs from the outside world, and the records that cross that line.

The SQL store (`adapters/sql_store.py`) implements `NotificationStore` on SQLite and PostgreSQL;
the leased work queues have their own ports, `DeliveryStore` (webhook deliveries) and
`EmailStore` (outbound emails). Every method is one transaction. Tenant-scoped methods take
the tenant id, so another tenant's row looks exactly like a missing one (the API answers 404
for both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from email.message import EmailMessage
from typing import Any, Protocol

from notification.domain.deliveries import EndpointHealth
from notification.service_layer.flow_ports import ClaimGate
from servicekit.data.pagination import Cursor
from servicekit.flow import FlowAnswer
from webhookdeliver import AttemptRecord

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class SubscriptionRecord:
    id: str
    tenant_id: str
    url: str
    event_types: list[str]
    description: str | None
    enabled: bool
    disabled_reason: str | None
    secret_enc: str
    previous_secret_enc: str | None
    previous_secret_expires_at: datetime | None
    failing_since: datetime | None
    consecutive_failures: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class DeliveryRecord:
    id: str
    tenant_id: str
    subscription_id: str
    event_id: str
    event_type: str
    status: str
    attempt_count: int
    next_attempt_at: datetime | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    attempts: list[AttemptRecord] = field(default_factory=list)


@dataclass(frozen=True)
class NewDelivery:
    id: str
    tenant_id: str
    subscription_id: str
    event_id: str
    event_type: str
    body: bytes


@dataclass(frozen=True)
class ClaimedDelivery:
    """A due delivery leased to one dispatcher claim, with what it takes to send it."""

    id: str
    tenant_id: str
    event_type: str
    body: bytes
    attempt_count: int
    round_attempts: int
    round_started_at: datetime | None
    subscription: SubscriptionRecord
    lost_attempt: bool = False
    """This claim took an expired lease over and counted its attempt as lost (the counts above
    include it; `notification.domain.deliveries` "Lost attempts")."""


@dataclass(frozen=True)
class DeliveryCompletion:
    """One finished attempt of a delivery claimed under the lease `owner`, and the state it
    leaves the delivery in. Written only while that lease is still the delivery's."""

    delivery_id: str
    subscription_id: str
    owner: str
    attempt: AttemptRecord | None
    """None: the delivery ended at a take-over, its lost attempt its round's last (no POST)."""
    ok: bool
    status: str
    next_attempt_at: datetime | None
    round_started_at: datetime
    last_error: str | None
    flow: FlowAnswer | None = None
    """The attempt's answer, as flow control reads it (None: no request went out)."""
    flow_key: tuple[str, str] | None = None
    """The attempt's (tenant, destination host:port)."""


@dataclass(frozen=True)
class CompletionReport:
    written: set[str]
    """Deliveries whose completion was written; the others had lost their lease (dropped)."""
    failing: dict[str, EndpointHealth]
    """The streak of each endpoint whose last written attempt failed, after this write."""


@dataclass(frozen=True)
class NotificationRecord:
    id: str
    tenant_id: str
    template: str
    title: str
    body: str
    data: dict[str, Any]
    created_at: datetime
    read_at: datetime | None


@dataclass(frozen=True)
class NewEmail:
    id: str
    recipients: list[str]
    subject: str
    text_body: str
    html_body: str


@dataclass(frozen=True)
class EmailRecord:
    """A due outbound email leased to one sender claim."""

    id: str
    tenant_id: str
    recipients: list[str]
    subject: str
    text_body: str
    html_body: str
    attempt_count: int


@dataclass(frozen=True)
class EmailCompletion:
    """One finished SMTP attempt of an email claimed under the lease `owner`, and the state it
    leaves the email in (`sent`, `pending` again at `next_attempt_at`, or `failed`). Written
    only while that lease is still the email's."""

    email_id: str
    owner: str
    status: str
    next_attempt_at: datetime | None
    last_error: str | None


class SubscriptionLimitReached(Exception):
    """The tenant already has `limit` live subscriptions (disabled ones count)."""

    def __init__(self, limit: int, live: int) -> None:
        super().__init__(f"max_subscriptions_per_tenant is {limit}; this request needs {live + 1}")
        self.limit = limit
        self.current = live + 1
        """The count the request would reach (like the scheduler's quota refusals)."""


class DuplicateSubscription(Exception):
    """A live subscription of the tenant already has this url and these event type filters."""

    def __init__(self, existing_id: str) -> None:
        super().__init__(f"subscription {existing_id} already sends these events to this url")
        self.existing_id = existing_id


class NotificationStore(Protocol):
    async def ping(self) -> bool: ...

    # subscriptions
    async def insert_subscription(self, sub: SubscriptionRecord, *, max_per_tenant: int) -> None:
        """Insert `sub` unless the tenant already has `max_per_tenant` live subscriptions
        (SubscriptionLimitReached) or a live one with the same url and the same set of filters
        (DuplicateSubscription); concurrent inserts of one tenant take turns, so neither rule
        can be overrun."""
        ...

    async def get_subscription(self, tenant_id: str, sub_id: str) -> SubscriptionRecord | None: ...
    async def list_subscriptions(
        self, tenant_id: str, limit: int, after: Cursor | None
    ) -> list[SubscriptionRecord]: ...
    async def update_subscription(
        self, tenant_id: str, sub_id: str, values: Mapping[str, Any]
    ) -> SubscriptionRecord | None: ...
    async def delete_subscription(self, tenant_id: str, sub_id: str, now: datetime) -> bool: ...

    # fan-out
    async def enabled_subscriptions(self, tenant_ids: set[str]) -> list[SubscriptionRecord]: ...
    async def insert_deliveries(self, rows: Sequence[NewDelivery], now: datetime) -> int: ...

    # delivery log
    async def list_deliveries(
        self, tenant_id: str, sub_id: str, limit: int, after: Cursor | None
    ) -> list[DeliveryRecord]: ...
    async def replay_delivery(
        self, tenant_id: str, sub_id: str, delivery_id: str, now: datetime
    ) -> DeliveryRecord | None: ...

    # alerts
    async def get_alert_contacts(self, tenant_id: str) -> list[str]: ...
    async def put_alert_contacts(
        self, tenant_id: str, emails: list[str], now: datetime
    ) -> None: ...
    async def record_alert(
        self,
        request_id: str,
        tenant_id: str,
        template: str,
        notification: NotificationRecord | None,
        email: NewEmail | None,
        now: datetime,
    ) -> bool: ...
    async def list_notifications(
        self, tenant_id: str, limit: int, after: Cursor | None, unread_only: bool
    ) -> list[NotificationRecord]: ...
    async def mark_notification_read(
        self, tenant_id: str, notification_id: str, now: datetime
    ) -> NotificationRecord | None: ...


class DeliveryStore(Protocol):
    """The dispatcher's side of `webhook_deliveries` (adapters/delivery_store.py). Leases:
    acquire, extend, release; a completion is a compare-and-set on the lease it was made under."""

    async def acquire_due_deliveries(
        self,
        owner: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        *,
        gate: ClaimGate | None = None,
    ) -> list[ClaimedDelivery]:
        """Lease due deliveries; with a `gate`, it admits them in the claim's transaction (those
        it defers are handed back in it, unattempted) and only the admitted are returned."""
        ...

    async def extend_delivery_leases(
        self, leases: Sequence[tuple[str, str]], until: datetime
    ) -> int: ...
    async def release_deliveries(self, leases: Sequence[tuple[str, str]], now: datetime) -> int: ...
    async def complete_deliveries(
        self, completions: Sequence[DeliveryCompletion], now: datetime
    ) -> CompletionReport: ...
    async def disable_subscriptions(
        self, sub_ids: Sequence[str], reason: str, now: datetime
    ) -> list[SubscriptionRecord]: ...


class EmailStore(Protocol):
    """The email sender's side of `outbound_emails` (adapters/email_store.py), with the
    delivery store's lease verbs: acquire, extend, release; a completion is a compare-and-set
    on the lease it was made under."""

    async def acquire_due_emails(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[EmailRecord]: ...
    async def extend_email_leases(
        self, leases: Sequence[tuple[str, str]], until: datetime
    ) -> int: ...
    async def release_emails(self, leases: Sequence[tuple[str, str]], now: datetime) -> int: ...
    async def complete_emails(
        self, completions: Sequence[EmailCompletion], now: datetime
    ) -> set[str]:
        """Write the completions still leased to their owner; returns the ids written."""
        ...


class Mailer(Protocol):
    @property
    def server(self) -> str:
        """Where messages go (the SMTP relay's host:port, or the .eml directory): the unit of
        the sender's per-server slots."""
        ...

    async def send(self, message: EmailMessage) -> None: ...


@dataclass(frozen=True)
class RenderedAlert:
    title: str
    subject: str
    text: str
    html: str


class AlertRenderer(Protocol):
    def render(self, template: str, data: Mapping[str, Any]) -> RenderedAlert: ...
