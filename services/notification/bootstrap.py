"""Composition root: turns settings into wired adapters and services (no HTTP, no loops; those
are the entrypoints'). The entrypoint `notification.entrypoints.runtime.build_notification`
builds on this."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus.catalogue import event_types_of
from notification.adapters.db import create_engine
from notification.adapters.delivery_store import SqlDeliveryStore
from notification.adapters.destinations import SqlDestinationStore
from notification.adapters.email_store import SqlEmailStore
from notification.adapters.mailers import EmlDirMailer, SmtpMailer
from notification.adapters.migrate import upgrade
from notification.adapters.rendering import JinjaAlertRenderer
from notification.adapters.sql_store import SqlNotificationStore
from notification.config import NotificationSettings
from notification.domain.deliveries import EndpointHealthPolicy
from notification.service_layer.alerting import AlertService
from notification.service_layer.dispatch import (
    DeliveryClient,
    DeliveryDispatcher,
    DispatchSettings,
    FlowControl,
)
from notification.service_layer.email_sender import EmailSender, EmailSettings
from notification.service_layer.fanout import FanOut
from notification.service_layer.flow_control import DeliveryFlowGate
from notification.service_layer.ports import Mailer
from notification.service_layer.subscriptions import SubscriptionService
from servicekit.data.secretbox import SecretBox, SecretBoxError
from servicekit.devkeys import load_or_create_key
from servicekit.flow import DestinationPolicy
from servicekit.settings import ConfigError
from webhookdeliver import BackoffPolicy, Deliverer

DEV_SECRET_KEY_FILE = "notification-secret.key"


def utc_now() -> datetime:
    return datetime.now(UTC)


def resolve_secret_key(settings: NotificationSettings) -> str:
    if settings.secret_key is not None:
        return settings.secret_key.get_secret_value()
    if settings.dev:
        return load_or_create_key(settings.var_dir / DEV_SECRET_KEY_FILE)
    raise ConfigError(
        "NOTIFICATION_SECRET_KEY is not set (32 random bytes, URL-safe base64); "
        "use --dev to generate one under ./var"
    )


def make_mailer(settings: NotificationSettings) -> Mailer:
    if settings.smtp_url is not None:
        return SmtpMailer(
            settings.smtp_url.get_secret_value(), timeout_seconds=settings.smtp_timeout_seconds
        )
    return EmlDirMailer(settings.var_dir / "mail")


@dataclass
class Container:
    settings: NotificationSettings
    engine: AsyncEngine
    store: SqlNotificationStore
    subscriptions: SubscriptionService
    fanout: FanOut
    alerts: AlertService
    dispatcher: DeliveryDispatcher
    destinations: SqlDestinationStore
    emails: EmailSender
    mailer: Mailer
    deliverer: Deliverer | None  # owned (closed by aclose) when we created it
    clock: Callable[[], datetime]

    async def migrate(self) -> None:
        await upgrade(self.engine)

    async def aclose(self) -> None:
        if self.deliverer is not None:
            await self.deliverer.close()
        await self.engine.dispose()


def bootstrap(
    settings: NotificationSettings,
    *,
    clock: Callable[[], datetime] = utc_now,
    delivery_client: DeliveryClient | None = None,
    mailer: Mailer | None = None,
) -> Container:
    try:
        box = SecretBox(resolve_secret_key(settings), settings.previous_secret_keys())
    except SecretBoxError as exc:
        raise ConfigError(f"NOTIFICATION_SECRET_KEY is malformed: {exc}") from exc
    engine = create_engine(settings.database_url, settings.database_bounds())
    store = SqlNotificationStore(engine)
    subscriptions = SubscriptionService(
        store,
        box,
        clock,
        allow_private_networks=settings.webhook_allow_private_networks,
        allowed_ports=settings.webhook_allowed_ports,
        secret_grace_seconds=settings.secret_grace_seconds,
        known_event_types=event_types_of(settings.event_topic_list()),
        max_per_tenant=settings.max_subscriptions_per_tenant,
    )
    alerts = AlertService(store, JinjaAlertRenderer(console_url=settings.console_public_url), clock)
    mailer = mailer or make_mailer(settings)
    email_settings = EmailSettings(
        max_attempts=settings.email_max_attempts, idle_poll_seconds=settings.poll_interval_seconds
    )
    emails = EmailSender(
        SqlEmailStore(engine), mailer, clock, mail_from=settings.mail_from, settings=email_settings
    )
    owned = None  # closed by aclose: a client passed in is the caller's
    if delivery_client is None:
        delivery_client = owned = make_deliverer(settings, clock)
    destinations = SqlDestinationStore(engine)
    dispatcher = DeliveryDispatcher(
        SqlDeliveryStore(engine),
        delivery_client,
        subscriptions,
        backoff_policy(settings),
        EndpointHealthPolicy(
            disable_after_seconds=settings.endpoint_disable_after_seconds,
            min_consecutive_failures=settings.endpoint_disable_min_failures,
        ),
        clock,
        on_endpoint_disabled=alerts.endpoint_disabled,
        settings=dispatch_settings(settings),
        flow=FlowControl(DeliveryFlowGate(destination_defaults(settings)), destinations),
    )
    return Container(
        settings=settings,
        engine=engine,
        store=store,
        subscriptions=subscriptions,
        fanout=FanOut(store, clock),
        alerts=alerts,
        dispatcher=dispatcher,
        destinations=destinations,
        emails=emails,
        mailer=mailer,
        deliverer=owned,
        clock=clock,
    )


def make_deliverer(settings: NotificationSettings, clock: Callable[[], datetime]) -> Deliverer:
    return Deliverer(
        allow_private_networks=settings.webhook_allow_private_networks,
        allowed_ports=settings.webhook_allowed_ports,
        clock=lambda: clock().timestamp(),
        connector_limit=max(settings.dispatch_concurrency, 100),
        connector_limit_per_host=settings.dispatch_per_endpoint_limit,
    )


def backoff_policy(settings: NotificationSettings) -> BackoffPolicy:
    return BackoffPolicy(
        initial_seconds=settings.retry_initial_seconds,
        max_seconds=settings.retry_max_seconds,
        multiplier=settings.retry_multiplier,
        max_attempts=settings.retry_max_attempts,
        max_elapsed_seconds=settings.retry_max_elapsed_seconds,
    )


def destination_defaults(settings: NotificationSettings) -> DestinationPolicy:
    return DestinationPolicy(settings.destination_max_in_flight, settings.destination_per_second)


def dispatch_settings(settings: NotificationSettings) -> DispatchSettings:
    return DispatchSettings(
        concurrency=settings.dispatch_concurrency,
        per_key_limit=settings.dispatch_per_endpoint_limit,
        claim_batch=settings.dispatch_batch_size,
        lease_seconds=settings.dispatch_lease_seconds,
        timeout_seconds=settings.delivery_timeout_seconds,
        idle_poll_seconds=settings.poll_interval_seconds,
    )
