"""Event adapters: the outbox relay that publishes the outbox to the bus, and its metrics."""

from scheduler.adapters.events.outbox_relay import OutboxLag, OutboxRelay, RelayConfig
from scheduler.adapters.events.relay_metrics import RelayMetrics

__all__ = ["OutboxLag", "OutboxRelay", "RelayConfig", "RelayMetrics"]
