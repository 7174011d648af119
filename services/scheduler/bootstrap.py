"""Composition root: builds the concrete adapters once from SchedulerSettings and hands them to
the entrypoints (API app, workers, CLI). Nothing else constructs engines or keys.

Per process: ONE event publisher (`Container.publisher`: Kafka when KAFKA_BOOTSTRAP_SERVERS is
set, else the process's `InProcessBus`, `Container.bus`), shared by the outbox relay and the event
action; and ONE tenant projection cache (`Container.tenants`), read synchronously by the planner,
the dispatcher and the API's limits. `start_tenants()` / `stop_tenants()` are reference-counted so
the API lifespan and the worker runtime of one process can both hold it. And ONE unit-of-work
factory (`Container.uow_factory`), every transaction of the API and the workers.

The workers of a process are wired here too (`build_workers`, from `WorkerOptions`): the planner,
the dispatcher with its action performers and the completion watchdog, the outbox relay, the
tenant-state consumer, the retention worker and the ledger's missing check;
`entrypoints.workers.runtime.WorkerRuntime` runs what this builds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy.ext.asyncio import AsyncEngine

from authclient import AuthSettings, TokenVerifier
from eventbus import InProcessBus, Publisher, make_consumer, make_publisher
from scheduler.adapters.actions import ActionRouter, WebhookAction
from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tenant_store import TenantProjectionCache
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.events.outbox_relay import OutboxRelay, RelayConfig
from scheduler.adapters.events.tenant_consumer import GROUP_ID, TOPICS, TenantConsumerWorker
from scheduler.adapters.secret_box import SecretBox
from scheduler.config import DEV_VAR_DIR, SchedulerSettings
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer import quota
from scheduler.service_layer.completion import CompletionWatchdog
from scheduler.service_layer.dispatch_service import (
    DispatchObserver,
    DispatchSettings,
    RunDispatcher,
)
from scheduler.service_layer.event_action import PublishingEventAction
from scheduler.service_layer.ledger_watch import LedgerWatch
from scheduler.service_layer.planner import PlannerWorker
from scheduler.service_layer.planning_service import PlanningSettings
from scheduler.service_layer.retention import (
    RetainedTable,
    RetentionPolicy,
    RetentionReport,
    prune_once,
)
from scheduler.service_layer.run_log import RunLog
from scheduler.service_layer.run_ports import TenantStatus
from scheduler.service_layer.schedules import Clock, LimitsProvider, SecretFactory
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from servicekit.data.retention import FIRST_PASS_DELAY_SECONDS, RetentionWorker
from webhookdeliver import Deliverer, generate_secret

log = logging.getLogger("scheduler.bootstrap")


def utc_now() -> datetime:
    return datetime.now(UTC)


class Worker(Protocol):
    async def run(self) -> None: ...


@dataclass
class Container:
    settings: SchedulerSettings
    engine: AsyncEngine
    uow_factory: SqlUnitOfWorkFactory
    secret_box: SecretBox
    clock: Clock
    auth_settings: AuthSettings
    verifier: TokenVerifier
    limits_for: LimitsProvider
    new_secret: SecretFactory
    tenants: TenantProjectionCache
    publisher: Publisher
    bus: InProcessBus | None = None
    """The in-process bus the publisher writes to (None with Kafka)."""
    _tenant_holders: int = 0
    _tenant_task: asyncio.Task[None] | None = None

    async def ensure_writable(self, tenant_id: str) -> None:
        """Raise errors.TenantSuspended when the tenant is suspended now (exact: read in a
        transaction of its own, not from the cache)."""
        async with self.uow_factory() as uow:
            await quota.ensure_writable(uow, tenant_id, self.clock())

    async def start_tenants(self) -> None:
        """Load the tenant projections and keep refreshing them (reference-counted)."""
        self._tenant_holders += 1
        if self._tenant_task is not None:
            return
        try:
            await self.tenants.refresh()
        except Exception as exc:  # the refresh loop retries; defaults answer meanwhile
            log.warning("tenant projections not loaded yet (%r); retrying", exc)
        self._tenant_task = asyncio.create_task(self.tenants.run(), name="tenant-cache")

    async def stop_tenants(self) -> None:
        self._tenant_holders = max(0, self._tenant_holders - 1)
        task = self._tenant_task
        if self._tenant_holders or task is None:
            return
        self._tenant_task = None
        # Cancelled, not stop()ped: the cache stays usable (and restartable) by its holders.
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def check_database(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def migrate(self) -> None:
        await upgrade(self.settings.database_url, bounds=self.settings.database_bounds())

    async def aclose(self) -> None:
        if self._tenant_task is not None:
            self._tenant_holders = 1
            await self.stop_tenants()
        await self.engine.dispose()


def default_entitlements(settings: SchedulerSettings) -> Entitlements:
    """Limits of a tenant without an entitlements event (DESIGN §9, configurable)."""
    return Entitlements(
        max_schedules=settings.default_max_schedules,
        min_interval_seconds=settings.default_min_interval_seconds,
        max_runs_per_day=settings.default_max_runs_per_day,
        max_payload_bytes=settings.default_max_payload_bytes,
    )


def bootstrap(
    settings: SchedulerSettings | None = None,
    *,
    dev: bool = False,
    var_dir: Path = DEV_VAR_DIR,
    clock: Clock = utc_now,
    auth_settings: AuthSettings | None = None,
    limits_for: LimitsProvider | None = None,
    new_secret: SecretFactory = generate_secret,
    bus: InProcessBus | None = None,
    publisher: Publisher | None = None,
) -> Container:
    """Build the container. Raises ConfigError (one line naming the variable) when a
    key is missing outside dev mode. Without Kafka the publisher writes to `bus` (a private one
    when not given; the embedded default passes the bus it shares with notification)."""
    settings = (settings or SchedulerSettings()).ensure_keys(dev=dev, var_dir=var_dir)
    if auth_settings is None:
        overrides: dict[str, Any] = {}
        if settings.auth_hs256_key is not None:
            overrides["AUTH_HS256_KEY"] = settings.auth_hs256_key
        auth_settings = AuthSettings(**overrides)
    engine = create_engine(settings.database_url, bounds=settings.database_bounds())
    box = SecretBox(settings.encryption_keys())
    tenants = TenantProjectionCache(engine, default_entitlements(settings))
    if publisher is None:
        if bus is None and not settings.kafka_bootstrap_servers:
            bus = InProcessBus()
        publisher = make_publisher(
            settings.kafka_bootstrap_servers,
            bus,
            idempotent=settings.kafka_idempotent,
            client_id="scheduler",
        )
    return Container(
        settings=settings,
        engine=engine,
        uow_factory=SqlUnitOfWorkFactory(engine, box),
        secret_box=box,
        clock=clock,
        auth_settings=auth_settings,
        verifier=TokenVerifier(auth_settings),
        limits_for=limits_for or tenants.entitlements,
        new_secret=new_secret,
        tenants=tenants,
        publisher=publisher,
        bus=None if settings.kafka_bootstrap_servers else bus,
    )


def rotation_grace(settings: SchedulerSettings) -> timedelta:
    return timedelta(seconds=settings.secret_rotation_grace_seconds)


Startup = Callable[[], Awaitable[None]]


# ---- the workers ----------------------------------------------------------------------------


@dataclass
class WorkerOptions:
    dispatch: DispatchSettings = field(default_factory=DispatchSettings)
    planning: PlanningSettings = field(default_factory=PlanningSettings)
    planner: bool = True
    dispatcher: bool = True
    relay: bool = False
    """Run the outbox relay (`serving`: on)."""
    tenant_consumer: bool = False
    """Consume platform-events and billing-entitlements (`serving`: on)."""
    retention: bool = False
    """Prune expired rows (`serving`: on; service_layer/retention.py)."""
    ledger_watch: bool = False
    """Count the ledger's missing occurrences (`serving`: on; service_layer/ledger_watch.py)."""
    planner_poll_seconds: float = 1.0

    @classmethod
    def serving(cls, settings: SchedulerSettings) -> WorkerOptions:
        """Every worker of `scheduler serve`, configured from the settings."""
        return cls(
            dispatch=DispatchSettings(
                concurrency=settings.dispatch_concurrency,
                # A destination's default in-flight limit, across every worker (flow control).
                per_key_limit=settings.destination_max_in_flight,
            ),
            planning=PlanningSettings(
                lookahead=timedelta(seconds=settings.planner_lookahead_seconds)
            ),
            relay=True,
            tenant_consumer=True,
            retention=True,
            ledger_watch=True,
        )


@dataclass
class Workers:
    """One process's workers (`build_workers`); those not asked for are None."""

    deliverer: Deliverer
    dispatcher: RunDispatcher
    planner: PlannerWorker
    relay: OutboxRelay | None
    tenant_consumer: TenantConsumerWorker | None
    retention: RetentionWorker[RetainedTable] | None
    ledger_watch: LedgerWatch | None
    completion_watchdog: CompletionWatchdog | None = None
    """Times out callback-mode runs past their deadline (with the dispatcher)."""


def build_workers(
    container: Container,
    options: WorkerOptions,
    *,
    observer: DispatchObserver,
    on_inserted: Callable[[int], None] | None = None,
    registry: CollectorRegistry | None = None,
    deliverer: Deliverer | None = None,
    tenants: TenantStatus | None = None,
    on_missing: Callable[[int], None] | None = None,
    on_timed_out: Callable[[int], None] | None = None,
) -> Workers:
    """`observer`: the dispatcher's metrics; `registry`: where the relay's and the retention
    worker's metrics go; `on_missing`: the ledger check's counter; `on_timed_out`: the
    completion watchdog's; `deliverer` (default: one sized
    for the dispatch settings, closed by the caller) and `tenants` (default: the container's
    projection cache) are for tests."""
    settings, clock, uows = container.settings, container.clock, container.uow_factory
    tenants = tenants or container.tenants
    d = options.dispatch
    deliverer = deliverer or Deliverer(
        allow_private_networks=settings.webhook_allow_private_networks,
        allowed_ports=settings.webhook_allowed_ports,
        connector_limit=max(d.concurrency, 10),
        # A tenant's policy may allow more than the default per destination (flow control
        # holds the limit across workers): the pool per host is the process's whole width.
        connector_limit_per_host=max(d.concurrency, 10),
    )
    dispatcher = RunDispatcher(
        uows,
        ActionRouter(
            WebhookAction(deliverer, clock, settings.public_url),
            PublishingEventAction(container.publisher, clock),
        ),
        clock,
        settings=d,
        tenants=tenants,
        observer=observer,
        run_log=RunLog(verbose=settings.log_runs),
        max_lease_expiries=settings.max_lease_expiries,
        misfire_grace=options.planning.misfire_grace,  # one grace: the planner's
        destination_per_second=settings.destination_per_second,
    )
    planner = PlannerWorker(
        uows,
        clock,
        settings=options.planning,
        tenants=tenants,
        on_planned=dispatcher.pipeline.wake,
        on_inserted=on_inserted,
        poll_seconds=options.planner_poll_seconds,
    )
    return Workers(
        deliverer=deliverer,
        dispatcher=dispatcher,
        planner=planner,
        relay=make_relay(container, container.publisher, registry=registry)
        if options.relay
        else None,
        tenant_consumer=make_tenant_consumer(container) if options.tenant_consumer else None,
        retention=make_retention_worker(container, registry=registry)
        if options.retention
        else None,
        ledger_watch=LedgerWatch(uows, clock, on_missing or (lambda _n: None))
        if options.ledger_watch
        else None,
        completion_watchdog=CompletionWatchdog(
            uows,
            clock,
            interval_seconds=settings.completion_watchdog_interval_seconds,
            on_timed_out=on_timed_out,
        )
        if options.dispatcher
        else None,
    )


# Settings the relay reads when SchedulerSettings defines them (env SCHEDULER_OUTBOX_BATCH_SIZE,
# _POLL_INTERVAL_SECONDS, _RETRY_MAX_SECONDS), with the RelayConfig defaults otherwise.
# SCHEDULER_OUTBOX_RETENTION_SECONDS is the retention worker's.
_RELAY_SETTING_FIELDS = {
    "outbox_batch_size": "batch_size",
    "outbox_poll_interval_seconds": "poll_interval_seconds",
    "outbox_retry_max_seconds": "retry_max_seconds",
}


def relay_config(settings: SchedulerSettings) -> RelayConfig:
    """RelayConfig from the settings that exist; defaults for the rest."""
    values = {
        target: getattr(settings, name)
        for name, target in _RELAY_SETTING_FIELDS.items()
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
    """The process's outbox relay (DESIGN §9) over the container's database, publishing with
    `publisher` (whose start/stop the caller owns). `registry`: where the lag metrics go (the
    API's /metrics registry in a combined process; prometheus_client's global one when None).
    Call `relay.wake()` after a commit that wrote outbox rows so the event leaves within
    milliseconds instead of the poll interval."""
    return OutboxRelay(
        container.engine,
        publisher,
        clock=container.clock,
        config=config or relay_config(container.settings),
        registry=registry,
    )


def make_tenant_consumer(container: Container, **kwargs: Any) -> TenantConsumerWorker:
    """The tenant-state consumer on the process's bus (Kafka, or the in-process bus), refreshing
    the container's projection cache after each batch."""
    consumer = make_consumer(
        container.settings.kafka_bootstrap_servers,
        container.bus,
        TOPICS,
        GROUP_ID,
        client_id="scheduler-tenant-state",
    )
    return TenantConsumerWorker(
        consumer,
        container.uow_factory,
        container.clock,
        defaults=container.tenants.defaults,
        cache=container.tenants,
        **kwargs,
    )


def retention_policy(settings: SchedulerSettings) -> RetentionPolicy:
    return RetentionPolicy(
        run_retention=timedelta(days=settings.run_retention_days),
        idempotency_ttl=timedelta(seconds=settings.idempotency_ttl_seconds),
        processed_events_retention=timedelta(days=settings.processed_events_retention_days),
        outbox_retention=timedelta(seconds=settings.outbox_retention_seconds),
        batch_size=settings.retention_batch_size,
    )


def retention_worker(
    uows: UnitOfWorkFactory,
    policy: RetentionPolicy,
    clock: Clock,
    *,
    interval_seconds: float = 300.0,
    start_delay_seconds: float = FIRST_PASS_DELAY_SECONDS,
    registry: CollectorRegistry | None = None,
) -> RetentionWorker[RetainedTable]:
    """servicekit's `RetentionWorker` running service_layer/retention.py's bounded pass every
    `interval_seconds` (one per worker process; replicas are safe), counting what went in
    `scheduler_retention_deleted_total{table}` (`table="outbox"`: sent outbox rows, which the
    relay never deletes itself), failed passes in `scheduler_retention_failures_total` and the
    last pass that completed in `scheduler_retention_last_success_timestamp_seconds`, on
    `registry` (the runtime's: the /metrics the process serves)."""

    async def one_pass(now: datetime) -> RetentionReport:
        return await prune_once(uows, policy, now)

    return RetentionWorker(
        one_pass,
        clock,
        deleted=Counter(
            "scheduler_retention_deleted",
            "Rows deleted by retention, by table.",
            ["table"],
            registry=registry,
        ),
        failures=Counter(
            "scheduler_retention_failures", "Retention passes that failed.", registry=registry
        ),
        last_success=Gauge(
            "scheduler_retention_last_success_timestamp_seconds",
            "Unix time of the last retention pass that completed.",
            registry=registry,
        ),
        interval_seconds=interval_seconds,
        start_delay_seconds=start_delay_seconds,
        logger=logging.getLogger("scheduler.retention"),
    )


def make_retention_worker(
    container: Container, *, registry: CollectorRegistry | None = None
) -> RetentionWorker[RetainedTable]:
    s = container.settings
    return retention_worker(
        container.uow_factory,
        retention_policy(s),
        container.clock,
        interval_seconds=s.retention_interval_seconds,
        registry=registry,
    )
