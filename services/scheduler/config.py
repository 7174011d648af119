"""Scheduler settings (DESIGN.md §3), read from the environment once in bootstrap and passed down.

Every field `x` is read from `SCHEDULER_X` (the shared base adds the unprefixed `KAFKA_*` and
`WEBHOOK_*`); docs/configuration.md is generated from these fields. Keys are SecretStr so they
print as asterisks. `ensure_keys(dev=...)` is the one place that decides what happens when a key
is missing: in dev mode it generates one under ./var (mode 0600); otherwise it raises ConfigError
whose message is one line naming the variable.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from scheduler.adapters.events.outbox_relay import MAX_BATCH_SIZE, RelayConfig
from scheduler.domain.planning import DEFAULT_LOOKAHEAD, MAX_LOOKAHEAD
from scheduler.domain.run import DEFAULT_MAX_LEASE_EXPIRIES
from scheduler.service_layer.apply import (
    DEFAULT_APPLY_TIMEOUT_SECONDS,
    DEFAULT_MAX_APPLY_REQUEST_BYTES,
)
from scheduler.service_layer.retention import RetentionPolicy
from servicekit.runtime.pipeline import PipelineSettings
from servicekit.settings import ConfigError, ServiceSettings, unprefixed

DEV_VAR_DIR = Path("var")
# The defaults live with the code that applies them; these settings only let them be overridden.
_RETENTION = RetentionPolicy()
_RELAY = RelayConfig()
DEV_SECRET_KEY_FILE = "scheduler_secret_key"
DEV_AUTH_KEY_FILE = "auth_hs256_key"
MAX_WORKER_PROCESSES = 64  # `serve --processes`: a pod with more cores runs more replicas


class SchedulerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="SCHEDULER_")

    database_url: str = Field(
        "sqlite+aiosqlite:///var/scheduler.db",
        description="`postgresql+asyncpg://…` in production.",
    )
    secret_key: SecretStr | None = Field(
        None,
        description="32 random bytes, URL-safe base64: encrypts target secrets at rest "
        "(AES-GCM). Required; `serve --dev` generates one under `var/`.",
    )
    previous_secret_keys: SecretStr | None = Field(
        None,
        description="Old keys (comma-separated, same format) that still decrypt while rows are "
        "re-encrypted after a rotation.",
    )
    # Read here as well as by authclient, so that dev mode can generate it (ensure_keys).
    auth_hs256_key: SecretStr | None = Field(
        None,
        validation_alias=unprefixed("AUTH_HS256_KEY"),
        description="See the token verification table.",
    )

    # Tenant limits for tenants without an entitlements event (DESIGN §9).
    default_max_schedules: int = Field(
        100, description="`max_schedules` of a tenant with no `entitlements.updated` event."
    )
    default_min_interval_seconds: int = Field(
        60, description="`min_interval_seconds` of a tenant with no `entitlements.updated` event."
    )
    default_max_runs_per_day: int = Field(
        10_000, description="`max_runs_per_day` of a tenant with no `entitlements.updated` event."
    )
    default_max_payload_bytes: int = Field(
        65_536,
        description="`max_payload_bytes` of a tenant with no `entitlements.updated` event.",
    )

    # Workers.
    dispatch_concurrency: int = Field(
        PipelineSettings().concurrency,
        ge=1,
        le=1000,
        description="Delivery attempts in flight per worker process (per target host:port: "
        "the destination's limit, `SCHEDULER_DESTINATION_MAX_IN_FLIGHT` or the tenant's).",
    )
    destination_max_in_flight: int = Field(
        10,
        ge=1,
        le=1000,
        description="Attempts in flight at once to one destination (a tenant's target "
        "host:port) when the tenant set no `max_in_flight` for it (`PUT "
        "/v1/destinations/{host:port}`): held by each worker process on its own while the "
        "destination has no policy and no state (no hold, no adaptive rate), across every "
        "worker process and replica once it has.",
    )
    destination_per_second: float | None = Field(
        None,
        ge=0.1,
        le=1000,
        description="Requests per second to one destination when the tenant set no "
        "`per_second` for it (unset: no rate).",
    )
    max_destinations: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="Destination policies one tenant may set.",
    )
    worker_processes: int = Field(
        1,
        ge=1,
        le=MAX_WORKER_PROCESSES,
        description="`serve --role worker` only: worker processes under one parent (about one "
        "core each; PostgreSQL only). `--processes` overrides it.",
    )
    max_lease_expiries: int = Field(
        DEFAULT_MAX_LEASE_EXPIRIES,
        ge=1,
        le=1000,
        description="A run whose lease expired this often (each a `worker_lost` attempt) fails "
        "`worker_lost` instead of being attempted again.",
    )
    log_runs: bool = Field(
        False,
        description="One log line per finished run or attempt at info level (else debug): "
        "`make run` turns it on; a busy worker settles thousands of runs a minute.",
    )
    planner_lookahead_seconds: int = Field(
        int(DEFAULT_LOOKAHEAD.total_seconds()),
        ge=1,
        le=int(MAX_LOOKAHEAD.total_seconds()),
        description="How far ahead runs are planned, so planning never adds lag.",
    )

    # Outbox relay (DESIGN §9); the defaults are RelayConfig's.
    outbox_batch_size: int = Field(
        _RELAY.batch_size,
        ge=1,
        le=MAX_BATCH_SIZE,
        description="Outbox relay: rows per publish.",
    )
    outbox_poll_interval_seconds: float = Field(
        _RELAY.poll_interval_seconds,
        gt=0,
        le=3600,
        description="Outbox relay: how long an idle relay waits before looking again (a commit "
        "in the same process wakes it at once).",
    )
    outbox_retry_max_seconds: float = Field(
        _RELAY.retry_max_seconds,
        ge=_RELAY.retry_initial_seconds,
        le=3600,
        description="Outbox relay: backoff cap while the broker is down.",
    )

    # Retention (service_layer/retention.py). At least 1 day of runs: today's runs count to
    # quotas.
    run_retention_days: int = Field(
        _RETENTION.run_retention.days,
        ge=1,
        le=3650,
        description="Terminal runs (with their attempts) and purged deleted schedules are "
        "deleted after this.",
    )
    idempotency_ttl_seconds: int = Field(
        int(_RETENTION.idempotency_ttl.total_seconds()),
        ge=60,
        le=90 * 86_400,
        description="How long an `Idempotency-Key` is remembered; a replay after it creates a "
        "new schedule.",
    )
    processed_events_retention_days: int = Field(
        _RETENTION.processed_events_retention.days,
        ge=1,
        le=3650,
        description="How long consumed event ids are kept for deduplication.",
    )
    outbox_retention_seconds: float = Field(
        _RETENTION.outbox_retention.total_seconds(),
        ge=0,
        le=366 * 86_400,
        description="Sent outbox rows (an audit trail, replays by hand) are deleted after this; "
        "unsent ones never.",
    )
    retention_interval_seconds: float = Field(
        300, gt=0, le=86_400, description="Time between retention passes."
    )
    retention_batch_size: int = Field(
        _RETENTION.batch_size,
        ge=1,
        le=10_000,
        description="Rows deleted per retention statement.",
    )

    # The apply route's own bounds (every other route keeps MAX_REQUEST_BYTES and
    # HTTP_REQUEST_TIMEOUT_SECONDS).
    max_apply_request_bytes: int = Field(
        DEFAULT_MAX_APPLY_REQUEST_BYTES,
        ge=1024,
        le=64 * 1024 * 1024,
        description="Body limit of `POST /v1/schedules/apply` (10,000 ordinary definitions are "
        "about 2 MB).",
    )
    http_apply_timeout_seconds: float = Field(
        DEFAULT_APPLY_TIMEOUT_SECONDS,
        gt=0,
        le=3600,
        description="Request deadline of `POST /v1/schedules/apply` (503 when no answer by then).",
    )

    secret_rotation_grace_seconds: int = Field(
        86_400,
        ge=0,
        le=30 * 86_400,
        description="How long the previous webhook secret keeps signing alongside the new one "
        "after a rotation.",
    )

    # Completion callbacks (DESIGN.md §7b).
    public_url: str = Field(
        "http://127.0.0.1:8089",
        min_length=1,
        max_length=200,
        pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
        description="The scheduler API's address as tenants' receivers reach it (through the "
        "gateway): a callback-mode delivery's `X-Run-Complete-Url` is "
        "`{SCHEDULER_PUBLIC_URL}/v1/runs/{run_id}/complete`. No trailing slash needed.",
    )
    completion_watchdog_interval_seconds: float = Field(
        1.0,
        gt=0,
        le=60,
        description="How often the worker looks for runs whose completion deadline passed "
        "(each becomes a failed attempt, `completion_timeout`, within about this much).",
    )
    completion_calls_per_minute: int = Field(
        10,
        ge=1,
        le=1000,
        description="Completion calls (`POST /v1/runs/{run_id}/complete`) one API process takes "
        "per run id per minute; more answer 429 with Retry-After.",
    )

    def encryption_keys(self) -> list[bytes]:
        """Current key first, then previous ones; raises ConfigError on a missing/bad key."""
        if self.secret_key is None:
            raise ConfigError(
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
        missing; otherwise ConfigError for the first missing one."""
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
            raise ConfigError(
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
        raise ConfigError(f"{name} is not URL-safe base64") from None
    if len(key) != 32:
        raise ConfigError(f"{name} must decode to 32 bytes, got {len(key)}")
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
