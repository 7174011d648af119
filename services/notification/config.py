"""Settings of the notification service (DESIGN.md §3), read once by the entrypoints and passed
down; nothing else reads the environment. Every field `x` is read from `NOTIFICATION_X` (the
shared base adds the unprefixed `KAFKA_*` and `WEBHOOK_*`); docs/configuration.md is generated
from these fields."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from notification.domain.deliveries import EndpointHealthPolicy
from notification.service_layer.dispatch import DispatchSettings
from notification.service_layer.email_sender import EmailSettings
from notification.service_layer.retention import RetentionPolicy
from notification.service_layer.subscriptions import DEFAULT_MAX_SUBSCRIPTIONS_PER_TENANT
from servicekit.settings import ServiceSettings, unprefixed

# The defaults live with the policies that use them; these settings only let them be overridden.
_DISPATCH = DispatchSettings()
_EMAIL = EmailSettings()
_RETENTION = RetentionPolicy()
_HEALTH = EndpointHealthPolicy()


class NotificationSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="NOTIFICATION_")

    database_url: str = Field(
        "sqlite+aiosqlite:///var/notification.db",
        description="`postgresql+asyncpg://…` in production.",
    )
    secret_key: SecretStr | None = Field(
        None,
        description="32 random bytes, URL-safe base64: encrypts subscription secrets at rest. "
        "Required; `serve --dev` generates one under `var/`.",
    )
    secret_keys_previous: str = Field(
        "",
        description="Old keys (comma-separated, same format) that still decrypt, so the key can "
        "rotate without re-encrypting at once.",
    )
    smtp_url: SecretStr | None = Field(
        None,
        description="`smtp://user:pass@host:587` (STARTTLS when offered) or `smtps://…:465`; "
        "unset: alerts are written as `.eml` files under `var/mail/`.",
    )
    mail_from: str = Field("scheduler-alerts@localhost", description="Sender of alert emails.")
    console_public_url: str | None = Field(
        None,
        validation_alias=unprefixed("CONSOLE_PUBLIC_URL"),
        description="The console's public origin (`https://scheduler.example.com`; it serves "
        "the APIs under /v1 too): alerts link its schedule and run pages and name it in their "
        "curl line. Unset: alerts name API paths only. `make run` sets the gateway's origin.",
    )
    smtp_timeout_seconds: float = Field(
        30.0, gt=0, le=300, description="Bound of one SMTP session step."
    )
    var_dir: Path = Field(
        Path("var"),
        description="Dev keys, SQLite files and the `.eml` fallback; the only path relative to "
        "the working directory.",
    )
    event_topics: str = Field(
        "schedule-events",
        description="Topics fanned out to subscriptions (comma-separated).",
    )
    requests_topic: str = Field(
        "notification-requests", description="Topic of alert requests from the scheduler."
    )
    destinations_topic: str = Field(
        "destination-events",
        description="Topic of the scheduler's flow-control events (a tenant's policy per "
        "destination, and holds): fan-out deliveries obey the same limits. Its consumer group "
        "is the consumer group's name plus `-destinations`.",
    )
    consumer_group: str = Field(
        "notification",
        description="Kafka consumer group (the requests consumer adds `-requests`).",
    )
    secret_grace_seconds: int = Field(
        24 * 3600,
        ge=0,
        le=30 * 24 * 3600,
        description="How long the previous subscription secret keeps signing alongside the new "
        "one after a rotation.",
    )
    max_subscriptions_per_tenant: int = Field(
        DEFAULT_MAX_SUBSCRIPTIONS_PER_TENANT,
        ge=1,
        le=10_000,
        description="Live subscriptions (disabled ones included) a tenant may have: each one "
        "turns every event it matches into a delivery. Past it a create answers 403 "
        "`…/quota-exceeded` naming the limit.",
    )
    # Full-jitter exponential backoff, as webhookdeliver does it: with these defaults the 7 waits
    # are drawn below 5 s, 20 s, ... 5.7 h (at most ~7.6 h in all unless a Retry-After lengthens
    # one, up to retry_max_seconds).
    retry_max_attempts: int = Field(
        8, ge=1, le=50, description="Attempts of a fan-out delivery before it fails."
    )
    retry_initial_seconds: float = Field(
        5.0, gt=0, description="Fan-out retries: cap of the first wait (full jitter)."
    )
    retry_max_seconds: float = Field(
        10 * 3600.0,
        gt=0,
        description="Fan-out retries: cap of any one wait, a `Retry-After` included.",
    )
    retry_multiplier: float = Field(
        4.0, ge=1, description="Fan-out retries: growth of the wait cap per attempt."
    )
    retry_max_elapsed_seconds: float = Field(
        3 * 24 * 3600.0,
        gt=0,
        description="Fan-out retries: no attempt later than this after the first.",
    )
    delivery_timeout_seconds: float = Field(
        _DISPATCH.timeout_seconds,
        gt=0,
        le=60,
        description="One delivery POST, connect to last byte.",
    )
    endpoint_disable_after_seconds: float = Field(
        _HEALTH.disable_after_seconds,
        gt=0,
        description="A subscription failing continuously this long (and at least "
        "`NOTIFICATION_ENDPOINT_DISABLE_MIN_FAILURES` times in a row) is disabled and the "
        "tenant alerted.",
    )
    endpoint_disable_min_failures: int = Field(
        _HEALTH.min_consecutive_failures,
        ge=1,
        description="Consecutive failed deliveries before a subscription can be disabled.",
    )
    dispatch_batch_size: int = Field(
        _DISPATCH.claim_batch, ge=1, le=1000, description="Deliveries claimed per query."
    )
    dispatch_concurrency: int = Field(
        _DISPATCH.concurrency,
        ge=1,
        le=256,
        description="Delivery attempts in flight per process.",
    )
    dispatch_per_endpoint_limit: int = Field(
        _DISPATCH.per_key_limit,
        ge=1,
        le=256,
        description="Attempts in flight at once to one endpoint (host:port), within "
        "`NOTIFICATION_DISPATCH_CONCURRENCY`.",
    )
    destination_max_in_flight: int = Field(
        10,
        ge=1,
        le=1000,
        description="Fan-out attempts in flight at once to one destination (a tenant's "
        "subscription host:port) with a state (a hold, an adaptive rate) but no "
        "`max_in_flight` set through the scheduler (`PUT /v1/destinations/{host:port}`), "
        "across every dispatcher replica. Without a policy or a state a destination is held by "
        "each process's `NOTIFICATION_DISPATCH_PER_ENDPOINT_LIMIT`. Keep it equal to "
        "`SCHEDULER_DESTINATION_MAX_IN_FLIGHT`.",
    )
    destination_per_second: float | None = Field(
        None,
        ge=0.1,
        le=1000,
        description="Fan-out requests per second to one destination when the tenant set no "
        "`per_second` for it (unset: no rate). Keep it equal to "
        "`SCHEDULER_DESTINATION_PER_SECOND`.",
    )
    dispatch_lease_seconds: float = Field(
        _DISPATCH.lease_seconds,
        gt=0,
        le=3600,
        description="A claimed delivery is leased this long, renewed every third of it while "
        "its attempt runs; one whose dispatcher died is claimable again once it expires.",
    )
    poll_interval_seconds: float = Field(
        _DISPATCH.idle_poll_seconds,
        gt=0,
        le=60,
        description="How long the idle delivery and email senders wait before looking again.",
    )
    consumer_batch_size: int = Field(
        200, ge=1, le=5000, description="Events taken from the bus per consumer step."
    )
    email_max_attempts: int = Field(
        _EMAIL.max_attempts, ge=1, le=50, description="Attempts of an alert email."
    )
    delivery_retention_days: int = Field(
        _RETENTION.delivery_retention.days,
        ge=1,
        le=3650,
        description="Finished webhook deliveries (and their attempts) are deleted after this.",
    )
    inbox_retention_days: int = Field(
        _RETENTION.inbox_retention.days,
        ge=1,
        le=3650,
        description="The in-app inbox, finished emails and alert dedup ids are deleted after this.",
    )
    retention_interval_seconds: float = Field(
        300.0, gt=0, le=86_400, description="Time between retention passes."
    )
    retention_batch_size: int = Field(
        _RETENTION.batch_size, ge=1, le=10_000, description="Rows deleted per retention statement."
    )
    dev: bool = Field(
        False,
        description="Dev mode: missing keys are generated under `var/` and SQLite is migrated "
        "on start. `notification serve` sets it from `--dev`, whatever this variable says.",
    )

    @field_validator("console_public_url")
    @classmethod
    def _origin(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http(s) URL such as https://scheduler.example.com")
        if parts.query or parts.fragment:
            raise ValueError("must have no query or fragment: alerts append the page's #/path")
        return value.strip().rstrip("/")

    def event_topic_list(self) -> list[str]:
        return [t.strip() for t in self.event_topics.split(",") if t.strip()]

    def previous_secret_keys(self) -> list[str]:
        return [k.strip() for k in self.secret_keys_previous.split(",") if k.strip()]
