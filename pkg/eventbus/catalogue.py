"""The event catalogue (DESIGN §9): every event type the platform publishes, by topic.

Producers name their types here and consumers check against it, so a subscription to a type
nobody publishes (a typo) is refused instead of silently never matching.
`tests/eventbus/test_catalogue.py` checks that every type the scheduler emits is listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SCHEDULE_EVENTS_TOPIC = "schedule-events"
PLATFORM_EVENTS_TOPIC = "platform-events"
BILLING_ENTITLEMENTS_TOPIC = "billing-entitlements"
DESTINATION_EVENTS_TOPIC = "destination-events"
"""Flow control per destination (DESIGN §7b), scheduler to notification: a tenant's policy for
a destination and the holds a destination asked for, so both services' deliveries obey them.
Internal: not fanned out to subscriptions (notification consumes it apart)."""

EVENT_TYPES_BY_TOPIC: Mapping[str, tuple[str, ...]] = {
    SCHEDULE_EVENTS_TOPIC: (
        "schedule.created",
        "schedule.updated",
        "schedule.deleted",
        "schedule.paused",
        "schedule.resumed",
        "schedule.completed",
        "schedule.triggered",
        "schedule.run.succeeded",
        "schedule.run.failed",
        "schedule.run.skipped",
        "schedule.run.too_fast",
    ),
    PLATFORM_EVENTS_TOPIC: ("tenant.suspended", "tenant.reinstated"),
    BILLING_ENTITLEMENTS_TOPIC: ("entitlements.updated",),
    DESTINATION_EVENTS_TOPIC: ("destination.updated", "destination.deleted", "destination.held"),
}


def event_types_of(topics: Iterable[str]) -> tuple[str, ...]:
    """The catalogued types published on `topics`, in catalogue order; unknown topics add none."""
    wanted = set(topics)
    return tuple(
        t for topic, types in EVENT_TYPES_BY_TOPIC.items() if topic in wanted for t in types
    )
