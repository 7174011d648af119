"""The event catalogue is the one list of published types: every type the scheduler emits is in
it (a subscription to one of them must be accepted), and topics map to their own types."""

from __future__ import annotations

import re
from pathlib import Path

from eventbus.catalogue import (
    EVENT_TYPES_BY_TOPIC,
    PLATFORM_EVENTS_TOPIC,
    SCHEDULE_EVENTS_TOPIC,
    event_types_of,
)

SCHEDULER = Path(__file__).resolve().parents[2] / "services" / "scheduler"
# A string literal that names an event type of the scheduler's own topic.
_LITERAL = re.compile(r"""["'](schedule\.[a-z_]+(?:\.[a-z_]+)*)["']""")


def test_every_event_type_the_scheduler_names_is_catalogued() -> None:
    named = {
        m.group(1)
        for path in SCHEDULER.rglob("*.py")
        for m in _LITERAL.finditer(path.read_text(encoding="utf-8"))
    }
    assert "schedule.run.failed" in named  # the scan sees the emitters
    assert named <= set(EVENT_TYPES_BY_TOPIC[SCHEDULE_EVENTS_TOPIC])


def test_types_of_topics() -> None:
    assert event_types_of([PLATFORM_EVENTS_TOPIC]) == ("tenant.suspended", "tenant.reinstated")
    assert "tenant.suspended" not in event_types_of([SCHEDULE_EVENTS_TOPIC])
    assert event_types_of(["some-other-topic"]) == ()
