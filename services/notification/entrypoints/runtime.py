"""The whole notification service in one object: API, consumers, dispatcher and email sender.

`notification serve` runs it under uvicorn; the embedded runner builds it beside the scheduler
and passes the process's shared `InProcessBus`:

    app = build_notification(settings, bus=shared_bus)
    await app.start()          # migrates first in --dev; starts consumers and loops
    ... serve app.asgi_app ...
    await app.stop()
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from datetime import datetime

from fastapi import FastAPI
from pydantic import SecretStr

from authclient import AuthSettings, TokenVerifier
from eventbus import InProcessBus, Publisher
from eventbus.factory import make_consumer, make_publisher
from notification.adapters.hold_events import HoldEvents
from notification.adapters.retention_store import SqlRetentionStore
from notification.bootstrap import Container, bootstrap, utc_now
from notification.config import NotificationSettings
from notification.entrypoints.api.app import create_app
from notification.entrypoints.retention import retention_policy, retention_worker
from notification.entrypoints.workers import (
    AlertRequestWorker,
    DestinationEventsWorker,
    EventFanOutWorker,
)
from notification.service_layer.dispatch import DeliveryClient
from notification.service_layer.ports import Mailer
from servicekit.devkeys import load_or_create_key
from servicekit.runtime.watchdog import Watchdog
from servicekit.runtime.worker import Step, WorkerGroup, WorkerLoop
from servicekit.settings import ConfigError

log = logging.getLogger(__name__)

# Same file name as the scheduler's dev key, so `scheduler token` tokens work here in dev.
DEV_AUTH_KEY_FILE = "auth_hs256_key"
STOP_TIMEOUT_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 30.0  # a consumer retries at least this often


def resolve_auth_settings(settings: NotificationSettings) -> AuthSettings:
    auth = AuthSettings()
    if auth.configured():
        return auth
    if settings.dev:
        key = load_or_create_key(
            settings.var_dir / DEV_AUTH_KEY_FILE, lambda: secrets.token_urlsafe(48)
        )
        return auth.model_copy(update={"AUTH_HS256_KEY": SecretStr(key)})
    raise ConfigError(
        "AUTH_HS256_KEY (or AUTH_JWKS_URL / AUTH_JWKS_FILE) is not set; tokens cannot be verified"
    )


class NotificationApp:
    def __init__(
        self,
        container: Container,
        asgi_app: FastAPI,
        events: EventFanOutWorker,
        requests: AlertRequestWorker,
        destinations: DestinationEventsWorker,
        holds: Publisher,
        *,
        watchdog: Watchdog | None = None,
    ) -> None:
        self.container = container
        self.watchdog = watchdog or Watchdog(
            step_timeout_seconds=container.settings.worker_step_timeout_seconds
        )
        """Every worker loop of this process (the API's readyz: 503 while one is overdue)."""
        self.asgi_app = asgi_app
        self.events = events
        self.requests = requests
        self.destinations = destinations
        self.holds = holds
        """Publishes the holds notification's deliveries meet, for the scheduler."""
        self.retention = retention_worker(
            SqlRetentionStore(container.engine),
            retention_policy(container.settings),
            container.clock,
            interval_seconds=container.settings.retention_interval_seconds,
        )
        self._workers: WorkerGroup | None = None
        self._workers_task: asyncio.Task[None] | None = None
        self._started = False

    async def start(self, *, run_workers: bool = True) -> None:
        """Migrate (dev only), start the consumers and, unless told not to, the loops."""
        settings = self.container.settings
        if settings.dev:
            await self.container.migrate()
        await self.events.consumer.start()
        await self.requests.consumer.start()
        await self.destinations.consumer.start()
        await self.holds.start()
        self._started = True
        if not run_workers:
            return
        idle = settings.poll_interval_seconds
        c = self.container
        workers = WorkerGroup(logger=log, watchdog=self.watchdog)
        # A consumer's poll waits up to `idle` for records.
        steps: dict[str, Step] = {
            "fanout": self.events.step,
            "alert-requests": self.requests.step,
            "destinations": self.destinations.step,
        }
        for name, step in steps.items():
            workers.add_loop(
                WorkerLoop(
                    name,
                    step,
                    idle_seconds=idle,
                    backoff_initial_seconds=min(2 * idle, MAX_BACKOFF_SECONDS),
                    backoff_max_seconds=MAX_BACKOFF_SECONDS,
                    logger=log,
                )
            )
        workers.add_loop(self.retention.loop)
        # Stop claiming, finish or release what is in flight, write what finished.
        workers.add("dispatcher", c.dispatcher.pipeline.run, drain=c.dispatcher.pipeline.stop)
        workers.add("email sender", c.emails.pipeline.run, drain=c.emails.pipeline.stop)
        self._workers = workers
        self._workers_task = asyncio.create_task(workers.run(), name="workers")

    async def stop(self) -> None:
        if self._workers is not None and self._workers_task is not None:
            await self._workers.stop(STOP_TIMEOUT_SECONDS)
            await asyncio.gather(self._workers_task, return_exceptions=True)
            self._workers = self._workers_task = None
        if self._started:
            await self.events.consumer.stop()
            await self.requests.consumer.stop()
            await self.destinations.consumer.stop()
            await self.holds.stop()
            self._started = False
        await self.container.aclose()


def build_notification(
    settings: NotificationSettings,
    bus: InProcessBus | None = None,
    *,
    clock: Callable[[], datetime] = utc_now,
    delivery_client: DeliveryClient | None = None,
    mailer: Mailer | None = None,
    verifier: TokenVerifier | None = None,
) -> NotificationApp:
    """Wire the service. Without Kafka and without `bus`, a private in-process bus is used
    (nothing publishes to it: useful only for running the API alone)."""
    container = bootstrap(settings, clock=clock, delivery_client=delivery_client, mailer=mailer)
    if verifier is None:
        verifier = TokenVerifier(resolve_auth_settings(settings))
    if settings.kafka_bootstrap_servers is None and bus is None:
        bus = InProcessBus()
    kafka = settings.kafka_bootstrap_servers
    events = EventFanOutWorker(
        make_consumer(
            kafka,
            bus,
            settings.event_topic_list(),
            settings.consumer_group,
            client_id="notification-events",
        ),
        container.fanout,
        batch_size=settings.consumer_batch_size,
        poll_seconds=settings.poll_interval_seconds,
    )
    requests = AlertRequestWorker(
        make_consumer(
            kafka,
            bus,
            [settings.requests_topic],
            f"{settings.consumer_group}-requests",
            client_id="notification-requests",
        ),
        container.alerts,
        batch_size=settings.consumer_batch_size,
        poll_seconds=settings.poll_interval_seconds,
    )
    destinations = DestinationEventsWorker(
        make_consumer(
            kafka,
            bus,
            [settings.destinations_topic],
            f"{settings.consumer_group}-destinations",
            client_id="notification-destinations",
        ),
        container.destinations,
        container.clock,
        batch_size=settings.consumer_batch_size,
        poll_seconds=settings.poll_interval_seconds,
    )
    holds = make_publisher(kafka, bus, idempotent=False, client_id="notification-holds")
    if container.dispatcher.flow is not None:
        container.dispatcher.flow.announce = HoldEvents(holds, settings.destinations_topic)
    watchdog = Watchdog(step_timeout_seconds=settings.worker_step_timeout_seconds)
    return NotificationApp(
        container,
        create_app(container, verifier, watchdog=watchdog),
        events,
        requests,
        destinations,
        holds,
        watchdog=watchdog,
    )
