"""Scheduler settings (DESIGN.md §3), read from the environment once in bootstrap and passed down.

Keys are SecretStr so they print as asterisks. `ensure_keys(dev=...)` is the one place that
decides what happens when a key is missing: in dev mode it generates one under ./var (mode 0600);
otherwise it raises MissingSetting whose message is one line naming the variable.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field, SecretStr
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from scheduler.domain.planning import DEFAULT_LOOKAHEAD, MAX_LOOKAHEAD
from scheduler.domain.run import DEFAULT_MAX_LEASE_EXPIRIES
from scheduler.service_layer.retention import RetentionPolicy
from servicekit.data.database import DatabaseBounds
from servicekit.http.body_limit import DEFAULT_MAX_REQUEST_BYTES
from servicekit.http.protocol import HttpLimits
from servicekit.runtime.pipeline import PipelineSettings
from servicekit.runtime.watchdog import DEFAULT_STEP_TIMEOUT_SECONDS
from webhookdeliver import allowed_ports_setting

DEV_VAR_DIR = Path("var")
_RETENTION = RetentionPolicy()  # the retention defaults live in the policy
_HTTP = HttpLimits()  # the HTTP server defaults live in servicekit
_DB = DatabaseBounds()  # the database bounds' defaults live in servicekit
DEV_SECRET_KEY_FILE = "scheduler_secret_key"
DEV_AUTH_KEY_FILE = "auth_hs256_key"


class MissingSetting(RuntimeError):
    """A required setting is absent or malformed; str() is one line naming the variable."""


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    database_url: str = Field(
        "sqlite+aiosqlite:///var/scheduler.db", validation_alias="SCHEDULER_DATABASE_URL"
    )
    # Bounds on every database call (servicekit/data/database.py says which stage each one bounds).
    db_connect_timeout_seconds: float = Field(
        _DB.connect_timeout_seconds,
        gt=0,
        le=300,
        validation_alias="SCHEDULER_DB_CONNECT_TIMEOUT_SECONDS",
    )
    db_command_timeout_seconds: float = Field(
        _DB.command_timeout_seconds,
        gt=0,
        le=3600,
        validation_alias="SCHEDULER_DB_COMMAND_TIMEOUT_SECONDS",
    )
    db_statement_timeout_seconds: float = Field(
        _DB.statement_timeout_seconds,
        ge=0,
        le=3600,
        validation_alias="SCHEDULER_DB_STATEMENT_TIMEOUT_SECONDS",
    )
    db_lock_timeout_seconds: float = Field(
        _DB.lock_timeout_seconds,
        ge=0,
        le=3600,
        validation_alias="SCHEDULER_DB_LOCK_TIMEOUT_SECONDS",
    )
    db_idle_in_transaction_timeout_seconds: float = Field(
        _DB.idle_in_transaction_timeout_seconds,
        ge=0,
        le=86_400,
        validation_alias="SCHEDULER_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS",
    )
    db_pool_timeout_seconds: float = Field(
        _DB.pool_timeout_seconds,
        gt=0,
        le=300,
        validation_alias="SCHEDULER_DB_POOL_TIMEOUT_SECONDS",
    )
    # A worker loop's step taking longer is cancelled; /readyz is 503 while a loop is overdue.
    worker_step_timeout_seconds: float = Field(
        DEFAULT_STEP_TIMEOUT_SECONDS,
        gt=0,
        le=3600,
        validation_alias="SCHEDULER_WORKER_STEP_TIMEOUT_SECONDS",
    )
    kafka_bootstrap_servers: str | None = Field(None, validation_alias="KAFKA_BOOTSTRAP_SERVERS")
    kafka_idempotent: bool = Field(True, validation_alias="KAFKA_IDEMPOTENT")
    secret_key: SecretStr | None = Field(None, validation_alias="SCHEDULER_SECRET_KEY")
    # Old keys still able to decrypt (comma-separated, same format) while rows are re-encrypted.
    previous_secret_keys: SecretStr | None = Field(
        None, validation_alias="SCHEDULER_PREVIOUS_SECRET_KEYS"
    )
    webhook_allow_private_networks: bool = Field(
        False, validation_alias="WEBHOOK_ALLOW_PRIVATE_NETWORKS"
    )
    # Ports a webhook target may name ("80,443,8443"); unset: 80 and 443 (what the egress
    # NetworkPolicy opens), or any port with private networks allowed (dev, loopback tests).
    webhook_allowed_ports: Annotated[
        frozenset[int] | None, NoDecode, BeforeValidator(allowed_ports_setting)
    ] = Field(None, validation_alias="WEBHOOK_ALLOWED_PORTS")
    auth_hs256_key: SecretStr | None = Field(None, validation_alias="AUTH_HS256_KEY")

    # Tenant limits for tenants without an entitlements event (DESIGN §9).
    default_max_schedules: int = Field(100, validation_alias="SCHEDULER_DEFAULT_MAX_SCHEDULES")
    default_min_interval_seconds: int = Field(
        60, validation_alias="SCHEDULER_DEFAULT_MIN_INTERVAL_SECONDS"
    )
    default_max_runs_per_day: int = Field(
        10_000, validation_alias="SCHEDULER_DEFAULT_MAX_RUNS_PER_DAY"
    )
    default_max_payload_bytes: int = Field(
        65_536, validation_alias="SCHEDULER_DEFAULT_MAX_PAYLOAD_BYTES"
    )

    # Workers.
    dispatch_concurrency: int = Field(
        PipelineSettings().concurrency,
        ge=1,
        le=1000,
        validation_alias="SCHEDULER_DISPATCH_CONCURRENCY",
    )
    max_lease_expiries: int = Field(
        DEFAULT_MAX_LEASE_EXPIRIES,
        ge=1,
        le=1000,
        validation_alias="SCHEDULER_MAX_LEASE_EXPIRIES",
    )  # a run whose lease expired this often fails `worker_lost` (DESIGN §6)
    planner_lookahead_seconds: int = Field(
        int(DEFAULT_LOOKAHEAD.total_seconds()),
        ge=1,
        le=int(MAX_LOOKAHEAD.total_seconds()),
        validation_alias="SCHEDULER_PLANNER_LOOKAHEAD_SECONDS",
    )

    # Outbox relay (DESIGN §9); unset keeps the relay's defaults (adapters/events/outbox_relay.py).
    outbox_batch_size: int | None = Field(
        None, ge=1, le=10_000, validation_alias="SCHEDULER_OUTBOX_BATCH_SIZE"
    )
    outbox_poll_interval_seconds: float | None = Field(
        None, gt=0, le=3600, validation_alias="SCHEDULER_OUTBOX_POLL_INTERVAL_SECONDS"
    )
    outbox_retry_max_seconds: float | None = Field(
        None, ge=0.5, le=3600, validation_alias="SCHEDULER_OUTBOX_RETRY_MAX_SECONDS"
    )

    # Retention (service_layer/retention.py): terminal runs and purged deleted schedules after
    # the run retention; idempotency keys after their TTL (a replay after it creates a new
    # schedule); consumer dedup ids and sent outbox rows after theirs. At least 1 day of runs:
    # today's runs count to quotas.
    run_retention_days: int = Field(
        _RETENTION.run_retention.days,
        ge=1,
        le=3650,
        validation_alias="SCHEDULER_RUN_RETENTION_DAYS",
    )
    idempotency_ttl_seconds: int = Field(
        int(_RETENTION.idempotency_ttl.total_seconds()),
        ge=60,
        le=90 * 86_400,
        validation_alias="SCHEDULER_IDEMPOTENCY_TTL_SECONDS",
    )
    processed_events_retention_days: int = Field(
        _RETENTION.processed_events_retention.days,
        ge=1,
        le=3650,
        validation_alias="SCHEDULER_PROCESSED_EVENTS_RETENTION_DAYS",
    )
    # Sent outbox rows (an audit trail, replays by hand); unsent ones are never deleted.
    outbox_retention_seconds: float = Field(
        _RETENTION.outbox_retention.total_seconds(),
        ge=0,
        le=366 * 86_400,
        validation_alias="SCHEDULER_OUTBOX_RETENTION_SECONDS",
    )
    retention_interval_seconds: float = Field(
        300, gt=0, le=86_400, validation_alias="SCHEDULER_RETENTION_INTERVAL_SECONDS"
    )
    retention_batch_size: int = Field(
        _RETENTION.batch_size, ge=1, le=10_000, validation_alias="SCHEDULER_RETENTION_BATCH_SIZE"
    )

    # Rotation: how long the previous webhook secret keeps signing alongside the new one.
    secret_rotation_grace_seconds: int = Field(
        86_400, ge=0, le=30 * 86_400, validation_alias="SCHEDULER_SECRET_ROTATION_GRACE_SECONDS"
    )
    # Whole request bodies above this are refused with 413 before parsing.
    max_request_bytes: int = Field(
        DEFAULT_MAX_REQUEST_BYTES,
        ge=1024,
        le=16 * 1024 * 1024,
        validation_alias="SCHEDULER_MAX_REQUEST_BYTES",
    )
    # HTTP server (servicekit/http/protocol.py): request headers and body must arrive within
    # their timeouts, idle keep-alive connections close, past the cap connections get 503.
    http_header_timeout_seconds: float = Field(
        _HTTP.header_timeout_seconds,
        gt=0,
        le=300,
        validation_alias="SCHEDULER_HTTP_HEADER_TIMEOUT_SECONDS",
    )
    http_body_timeout_seconds: float = Field(
        _HTTP.body_timeout_seconds,
        gt=0,
        le=3600,
        validation_alias="SCHEDULER_HTTP_BODY_TIMEOUT_SECONDS",
    )
    http_keep_alive_seconds: float = Field(
        _HTTP.keep_alive_seconds, gt=0, le=300, validation_alias="SCHEDULER_HTTP_KEEP_ALIVE_SECONDS"
    )
    http_max_connections: int = Field(
        _HTTP.max_connections, ge=1, le=1_000_000, validation_alias="SCHEDULER_HTTP_MAX_CONNECTIONS"
    )
    http_backlog: int = Field(
        _HTTP.backlog, ge=1, le=65_535, validation_alias="SCHEDULER_HTTP_BACKLOG"
    )

    def http_limits(self) -> HttpLimits:
        return HttpLimits.of(self)

    def database_bounds(self) -> DatabaseBounds:
        return DatabaseBounds.of(self)

    def encryption_keys(self) -> list[bytes]:
        """Current key first, then previous ones; raises MissingSetting on a missing/bad key."""
        if self.secret_key is None:
            raise MissingSetting(
                "SCHEDULER_SECRET_KEY is not set (32 random bytes, URL-safe base64); "
                "use `scheduler serve --dev` for a generated dev key"
            )
        keys = [_decode_key("SCHEDULER_SECRET_KEY", self.secret_key.get_secret_value())]
        if self.previous_secret_keys is not None:
            for raw in self.previous_secret_keys.get_secret_value().split(","):
                if raw.strip():
                    keys.append(_decode_key("SCHEDULER_PREVIOUS_SECRET_KEYS", raw.strip()))
        return keys

    def ensure_keys(self, *, dev: bool, var_dir: Path = DEV_VAR_DIR) -> SchedulerSettings:
        """Return settings with both keys present: in dev mode generated (0600) under var_dir when
        missing; otherwise MissingSetting for the first missing one."""
        updates: dict[str, SecretStr] = {}
        if self.secret_key is None and dev:
            updates["secret_key"] = SecretStr(
                read_or_create_dev_key(var_dir / DEV_SECRET_KEY_FILE, _new_secret_key)
            )
        if self.auth_hs256_key is None and dev and not _jwks_configured():
            updates["auth_hs256_key"] = SecretStr(
                read_or_create_dev_key(var_dir / DEV_AUTH_KEY_FILE, _new_auth_key)
            )
        settings = self.model_copy(update=updates)
        settings.encryption_keys()
        if settings.auth_hs256_key is None and not _jwks_configured():
            raise MissingSetting(
                "AUTH_HS256_KEY (or AUTH_JWKS_URL / AUTH_JWKS_FILE) is not set; "
                "tokens cannot be verified"
            )
        return settings


def _jwks_configured() -> bool:
    return bool(os.environ.get("AUTH_JWKS_URL") or os.environ.get("AUTH_JWKS_FILE"))


def _decode_key(name: str, raw: str) -> bytes:
    try:
        key = base64.urlsafe_b64decode(raw.encode("ascii") + b"=" * (-len(raw) % 4))
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise MissingSetting(f"{name} is not URL-safe base64") from None
    if len(key) != 32:
        raise MissingSetting(f"{name} must decode to 32 bytes, got {len(key)}")
    return key


def _new_secret_key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii")


def _new_auth_key() -> str:
    return secrets.token_urlsafe(48)


def read_or_create_dev_key(path: Path, make: object) -> str:
    """Read a dev key file, creating it (mode 0600, exclusive create) when absent."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    assert callable(make)
    value = str(make())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race: use its key
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value
