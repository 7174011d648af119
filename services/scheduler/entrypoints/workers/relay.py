"""The outbox relay as a worker of the `worker` role (DESIGN §9).

Wiring (bootstrap / `scheduler serve`): build ONE publisher per process with
`eventbus.make_publisher(settings.kafka_bootstrap_servers, bus,
idempotent=settings.kafka_idempotent)`,
`await publisher.start()` before the workers and `await publisher.stop()` after them, and hand the
same publisher to the dispatcher's event action. Then:

    relay = make_relay(container, publisher, registry=metrics_registry)
    task = asyncio.create_task(relay.run())   # until relay.stop() or cancellation

and, optionally, call `relay.wake()` after a commit that wrote outbox rows so the event leaves
within milliseconds instead of the poll interval (200 ms).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from eventbus import Publisher
from scheduler.adapters.events.outbox_relay import OutboxRelay, RelayConfig
from scheduler.bootstrap import Container
from scheduler.config import SchedulerSettings

# Settings the relay reads when SchedulerSettings defines them (env SCHEDULER_OUTBOX_BATCH_SIZE,
# _POLL_INTERVAL_SECONDS, _RETRY_MAX_SECONDS), with the RelayConfig defaults otherwise.
# SCHEDULER_OUTBOX_RETENTION_SECONDS is the retention worker's (workers/retention.py).
_SETTING_FIELDS = {
    "outbox_batch_size": "batch_size",
    "outbox_poll_interval_seconds": "poll_interval_seconds",
    "outbox_retry_max_seconds": "retry_max_seconds",
}


def relay_config(settings: SchedulerSettings) -> RelayConfig:
    """RelayConfig from the settings that exist; defaults for the rest."""
    values = {
        target: getattr(settings, name)
        for name, target in _SETTING_FIELDS.items()
        if getattr(settings, name, None) is not None
    }
    return RelayConfig(**values)


def make_relay(
    container: Container,
    publisher: Publisher,
    *,
    config: RelayConfig | None = None,
    registry: CollectorRegistry | None = None,
) -> OutboxRelay:
    """The process's relay over the container's database, publishing with `publisher` (whose
    start/stop the caller owns). `registry`: where the lag metrics go (the API's /metrics
    registry in a combined process; prometheus_client's global registry when None)."""
    return OutboxRelay(
        container.engine,
        publisher,
        clock=container.clock,
        config=config or relay_config(container.settings),
        registry=registry,
    )
