"""Prometheus metrics of the outbox relay (DESIGN §9: the lag is visible in /metrics).

One set per registry: a process that builds several relays (tests, a restarted worker) shares the
collectors instead of failing on a duplicate registration.
"""

from __future__ import annotations

import weakref

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, RelayMetrics] = (
    weakref.WeakKeyDictionary()
)


class RelayMetrics:
    """The relay's collectors, registered in `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.unsent = Gauge(
            "scheduler_outbox_unsent",
            "Outbox events written but not yet acknowledged by the bus.",
            registry=registry,
        )
        self.oldest_unsent_age = Gauge(
            "scheduler_outbox_oldest_unsent_age_seconds",
            "Age of the oldest unsent outbox event (0 when none is waiting).",
            registry=registry,
        )
        self.published = Counter(
            "scheduler_outbox_published",
            "Outbox events acknowledged by the bus (a republish after a crash counts again).",
            registry=registry,
        )
        self.publish_failures = Counter(
            "scheduler_outbox_publish_failures",
            "Relay batches that the bus did not acknowledge (they are retried with backoff).",
            registry=registry,
        )
        self.rejected = Counter(
            "scheduler_outbox_rejected",
            "Outbox events too large for the bus, logged and set aside instead of blocking.",
            registry=registry,
        )
        self.leader = Gauge(
            "scheduler_outbox_relay_leader",
            "1 while this process is the active outbox relay, 0 while it stands by.",
            registry=registry,
        )

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> RelayMetrics:
        """The relay metrics of `registry` (default: prometheus_client's global registry)."""
        target = registry if registry is not None else REGISTRY
        metrics = _BY_REGISTRY.get(target)
        if metrics is None:
            metrics = cls(target)
            _BY_REGISTRY[target] = metrics
        return metrics
