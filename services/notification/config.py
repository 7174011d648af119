"""Settings of the notification service (DESIGN.md §3), read once by the entrypoints and passed
down; nothing else reads the environment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AliasChoices, BeforeValidator, Field, SecretStr
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from notification.service_layer.dispatch import DispatchSettings
from notification.service_layer.email_sender import EmailSettings
from notification.service_layer.retention import RetentionPolicy
from servicekit.data.database import DatabaseBounds
from servicekit.http.body_limit import DEFAULT_MAX_REQUEST_BYTES
from servicekit.http.protocol import HttpLimits
from servicekit.runtime.watchdog import DEFAULT_STEP_TIMEOUT_SECONDS
from webhookdeliver import allowed_ports_setting

# The defaults live with the policies that use them; these settings only let them be overridden.
_DISPATCH = DispatchSettings()
_EMAIL = EmailSettings()
_RETENTION = RetentionPolicy()
_DB = DatabaseBounds()
_HTTP = HttpLimits()


class NotificationSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="NOTIFICATION_", extra="ignore", env_ignore_empty=True, populate_by_name=True
    )

    database_url: str = "sqlite+aiosqlite:///var/notification.db"
    # Bounds on every database call (servicekit/data/database.py says which stage each one bounds).
    db_connect_timeout_seconds: float = Field(default=_DB.connect_timeout_seconds, gt=0, le=300)
    db_command_timeout_seconds: float = Field(default=_DB.command_timeout_seconds, gt=0, le=3600)
    db_statement_timeout_seconds: float = Field(
        default=_DB.statement_timeout_seconds, ge=0, le=3600
    )
    db_lock_timeout_seconds: float = Field(default=_DB.lock_timeout_seconds, ge=0, le=3600)
    db_idle_in_transaction_timeout_seconds: float = Field(
        default=_DB.idle_in_transaction_timeout_seconds, ge=0, le=86_400
    )
    db_pool_timeout_seconds: float = Field(default=_DB.pool_timeout_seconds, gt=0, le=300)
    # A worker loop's step taking longer is cancelled; /readyz is 503 while a loop is overdue.
    worker_step_timeout_seconds: float = Field(default=DEFAULT_STEP_TIMEOUT_SECONDS, gt=0, le=3600)
    # 32 random bytes, URL-safe base64; encrypts subscription secrets at rest. Previous keys
    # (comma-separated) still decrypt, so the key can rotate without re-encrypting at once.
    secret_key: SecretStr | None = None
    secret_keys_previous: str = ""
    smtp_url: SecretStr | None = None
    mail_from: str = "scheduler-alerts@localhost"
    smtp_timeout_seconds: float = Field(default=30.0, gt=0, le=300)
    # Only ./var is relative to the working directory (dev keys, SQLite files, .eml fallback).
    var_dir: Path = Path("var")
    kafka_bootstrap_servers: str | None = Field(
        default=None,
        validation_alias=AliasChoices("kafka_bootstrap_servers", "KAFKA_BOOTSTRAP_SERVERS"),
    )
    kafka_idempotent: bool = Field(
        default=True, validation_alias=AliasChoices("kafka_idempotent", "KAFKA_IDEMPOTENT")
    )
    webhook_allow_private_networks: bool = Field(
        default=False,
        validation_alias=AliasChoices(
            "webhook_allow_private_networks", "WEBHOOK_ALLOW_PRIVATE_NETWORKS"
        ),
    )
    # Ports a webhook URL may name ("80,443,8443"); unset: 80 and 443 (what the egress
    # NetworkPolicy opens), or any port with private networks allowed (dev, loopback tests).
    webhook_allowed_ports: Annotated[
        frozenset[int] | None, NoDecode, BeforeValidator(allowed_ports_setting)
    ] = Field(
        default=None,
        validation_alias=AliasChoices("webhook_allowed_ports", "WEBHOOK_ALLOWED_PORTS"),
    )
    # Topics fanned out to subscriptions (comma-separated in the environment).
    event_topics: str = "schedule-events"
    requests_topic: str = "notification-requests"
    consumer_group: str = "notification"
    # Rotation grace: the previous subscription secret keeps signing alongside the new one.
    secret_grace_seconds: int = Field(default=24 * 3600, ge=0, le=30 * 24 * 3600)
    # Retries of a fan-out delivery (full-jitter exponential backoff, as webhookdeliver does it):
    # 8 attempts; the 7 waits are drawn below 5 s, 20 s, ... 5.7 h (at most ~7.6 h in all unless
    # a Retry-After lengthens one, up to retry_max_seconds).
    retry_max_attempts: int = Field(default=8, ge=1, le=50)
    retry_initial_seconds: float = Field(default=5.0, gt=0)
    retry_max_seconds: float = Field(default=10 * 3600.0, gt=0)
    retry_multiplier: float = Field(default=4.0, ge=1)
    retry_max_elapsed_seconds: float = Field(default=3 * 24 * 3600.0, gt=0)
    delivery_timeout_seconds: float = Field(default=_DISPATCH.timeout_seconds, gt=0, le=60)
    # Endpoint health (see domain/deliveries.py): disable after 5 days of continuous failure.
    endpoint_disable_after_seconds: float = Field(default=5 * 24 * 3600.0, gt=0)
    endpoint_disable_min_failures: int = Field(default=3, ge=1)
    dispatch_batch_size: int = Field(default=_DISPATCH.claim_batch, ge=1, le=1000)
    dispatch_concurrency: int = Field(default=_DISPATCH.concurrency, ge=1, le=256)
    # Attempts in flight at once to one endpoint (host:port), within dispatch_concurrency.
    dispatch_per_endpoint_limit: int = Field(default=_DISPATCH.per_key_limit, ge=1, le=256)
    # A claimed delivery is leased for this long and the lease renewed every third of it while
    # its attempt runs; one whose dispatcher died is claimable again once its lease expires.
    dispatch_lease_seconds: float = Field(default=_DISPATCH.lease_seconds, gt=0, le=3600)
    poll_interval_seconds: float = Field(default=_DISPATCH.idle_poll_seconds, gt=0, le=60)
    consumer_batch_size: int = Field(default=200, ge=1, le=5000)
    email_max_attempts: int = Field(default=_EMAIL.max_attempts, ge=1, le=50)
    # Retention (service_layer/retention.py): finished webhook deliveries (and their attempts)
    # after NOTIFICATION_DELIVERY_RETENTION_DAYS; the in-app inbox, finished emails and the alert
    # dedup ids after NOTIFICATION_INBOX_RETENTION_DAYS. Passes every *_INTERVAL_SECONDS.
    delivery_retention_days: int = Field(default=_RETENTION.delivery_retention.days, ge=1, le=3650)
    inbox_retention_days: int = Field(default=_RETENTION.inbox_retention.days, ge=1, le=3650)
    retention_interval_seconds: float = Field(default=300.0, gt=0, le=86_400)
    retention_batch_size: int = Field(default=_RETENTION.batch_size, ge=1, le=10_000)
    # Whole request bodies above this are refused with 413 before parsing.
    max_request_bytes: int = Field(default=DEFAULT_MAX_REQUEST_BYTES, ge=1024, le=16 * 1024 * 1024)
    # HTTP server (servicekit/http/protocol.py): request headers and body must arrive within
    # their timeouts, idle keep-alive connections close, past the cap connections get 503.
    http_header_timeout_seconds: float = Field(default=_HTTP.header_timeout_seconds, gt=0, le=300)
    http_body_timeout_seconds: float = Field(default=_HTTP.body_timeout_seconds, gt=0, le=3600)
    http_keep_alive_seconds: float = Field(default=_HTTP.keep_alive_seconds, gt=0, le=300)
    http_max_connections: int = Field(default=_HTTP.max_connections, ge=1, le=1_000_000)
    http_backlog: int = Field(default=_HTTP.backlog, ge=1, le=65_535)
    dev: bool = False

    def http_limits(self) -> HttpLimits:
        return HttpLimits.of(self)

    def database_bounds(self) -> DatabaseBounds:
        return DatabaseBounds.of(self)

    def event_topic_list(self) -> list[str]:
        return [t.strip() for t in self.event_topics.split(",") if t.strip()]

    def previous_secret_keys(self) -> list[str]:
        return [k.strip() for k in self.secret_keys_previous.split(",") if k.strip()]
