"""Alert requests: what the scheduler asks the notification service to tell a tenant
(DESIGN §9 `notification-requests`). One builder for every alert; the breaker and quota
enforcement differ only in their template, id and data."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from scheduler.domain.events import NOTIFICATION_REQUESTS_TOPIC, DomainEvent

ALERT_REQUESTED = "alert.requested"
ALERT_CHANNELS = ("email", "in_app")
TEMPLATE_AUTO_PAUSED = "schedule_auto_paused"
"""The breaker paused a schedule."""
TEMPLATE_QUOTA_PAUSED = "schedule_quota_paused"
"""A downgrade of the tenant's limits paused schedules."""
TEMPLATE_RUN_TOO_FAST = "schedule_run_too_fast"
"""A callback-mode run completed sooner than its schedule's min_duration_seconds."""


def alert_request(
    *,
    id: str,
    tenant_id: str,
    schedule_id: str,
    template: str,
    data: Mapping[str, Any],
    now: datetime,
) -> DomainEvent:
    """The alert request event, keyed by the schedule it is about. `id` must be stable for what
    the alert describes, so a redone transaction does not alert twice."""
    return DomainEvent(
        id=id,
        type=ALERT_REQUESTED,
        tenant_id=tenant_id,
        time=now,
        schedule_id=schedule_id,
        data={
            "tenant_id": tenant_id,
            "channels": list(ALERT_CHANNELS),
            "template": template,
            "data": dict(data),
        },
        topic=NOTIFICATION_REQUESTS_TOPIC,
    )
