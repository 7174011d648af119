"""The settings base of both services (DESIGN §3) and the one error a bad setting raises.

Each service subclasses `ServiceSettings` with its own `env_prefix` (`SCHEDULER_`,
`NOTIFICATION_`): a field `x` reads `<PREFIX>X`. The few variables both services read under one
unprefixed name (`KAFKA_*`, `WEBHOOK_*`) are declared here once, with a `validation_alias` that
keeps the prefix off. `AUTH_*` belongs to `authclient.AuthSettings`. Defaults of the prefixed
bounds live with the code that applies them (`DatabaseBounds`, `HttpLimits`, the watchdog).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from servicekit.data.database import DatabaseBounds
from servicekit.http.body_limit import DEFAULT_MAX_REQUEST_BYTES
from servicekit.http.protocol import HttpLimits
from servicekit.runtime.watchdog import DEFAULT_STEP_TIMEOUT_SECONDS
from webhookdeliver import allowed_ports_setting

_DB = DatabaseBounds()
_HTTP = HttpLimits()


def unprefixed(env: str) -> AliasChoices:
    """Read from `env` as it is, without the service's prefix; in code, by the field's name.

    Not `populate_by_name`: with it pydantic-settings would also read `<PREFIX><FIELD>`."""
    return AliasChoices(env.lower(), env)


class ConfigError(ValueError):
    """A setting is missing or malformed; str() is the one line to print, naming the variable.

    A ValueError, as pydantic's ValidationError (which it replaces at construction) is one."""


class ServiceSettings(BaseSettings):
    """Settings every service has. An empty variable (`X=`) means unset, as in most shells and
    compose files. Construction raises ConfigError naming the environment variable."""

    model_config = SettingsConfigDict(extra="ignore", env_ignore_empty=True)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(_one_line(type(self), exc)) from None
        except SettingsError as exc:
            raise ConfigError(f"invalid setting: {exc}") from None

    # Shared, unprefixed names.
    kafka_bootstrap_servers: str | None = Field(
        None,
        validation_alias=unprefixed("KAFKA_BOOTSTRAP_SERVERS"),
        description="Comma-separated Kafka brokers; unset: the in-process bus (one process).",
    )
    kafka_idempotent: bool = Field(
        True,
        validation_alias=unprefixed("KAFKA_IDEMPOTENT"),
        description="Idempotent producer; `false` for brokers that refuse `InitProducerId` "
        "(the test broker).",
    )
    webhook_allow_private_networks: bool = Field(
        False,
        validation_alias=unprefixed("WEBHOOK_ALLOW_PRIVATE_NETWORKS"),
        description="Tests and local demos only (`make run` sets it): lets target and "
        "subscription URLs resolve to loopback/private addresses and name `localhost`. "
        "Production never.",
    )
    webhook_allowed_ports: Annotated[
        frozenset[int] | None, NoDecode, BeforeValidator(allowed_ports_setting)
    ] = Field(
        None,
        validation_alias=unprefixed("WEBHOOK_ALLOWED_PORTS"),
        description="Ports a target or subscription URL may name (comma-separated); others are "
        "a 422 at save time and `ssrf_blocked` at send time. Unset: 80 and 443 (what the "
        "`webhook-egress` NetworkPolicy opens), or any port while private networks are allowed.",
    )

    # Prefixed: <PREFIX>DB_*, <PREFIX>WORKER_*, <PREFIX>MAX_REQUEST_BYTES, <PREFIX>HTTP_*.
    db_connect_timeout_seconds: float = Field(
        _DB.connect_timeout_seconds,
        gt=0,
        le=300,
        description="Database connect and handshake bound.",
    )
    db_command_timeout_seconds: float = Field(
        _DB.command_timeout_seconds,
        gt=0,
        le=3600,
        description="One database round trip, on the client (asyncpg `command_timeout`; also "
        "ends a call on a hung connection).",
    )
    db_statement_timeout_seconds: float = Field(
        _DB.statement_timeout_seconds,
        ge=0,
        le=3600,
        description="PostgreSQL `statement_timeout` (0 disables); migrations allow 1800 s.",
    )
    db_lock_timeout_seconds: float = Field(
        _DB.lock_timeout_seconds,
        ge=0,
        le=3600,
        description="PostgreSQL `lock_timeout` (0 disables); SQLite waits 30 s for a writer's "
        "lock whatever this says.",
    )
    db_idle_in_transaction_timeout_seconds: float = Field(
        _DB.idle_in_transaction_timeout_seconds,
        ge=0,
        le=86_400,
        description="PostgreSQL `idle_in_transaction_session_timeout` (0 disables).",
    )
    db_pool_timeout_seconds: float = Field(
        _DB.pool_timeout_seconds,
        gt=0,
        le=300,
        description="Wait for a pooled database connection.",
    )
    worker_step_timeout_seconds: float = Field(
        DEFAULT_STEP_TIMEOUT_SECONDS,
        gt=0,
        le=3600,
        description="A worker loop's step taking longer is cancelled (logged with the loop's "
        "name); `/readyz` is 503 while a loop has not completed a cycle within its idle wait "
        "plus this.",
    )
    max_request_bytes: int = Field(
        DEFAULT_MAX_REQUEST_BYTES,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Request body limit of the API: larger bodies get 413 problem+json from "
        "`Content-Length` before reading, chunked ones once the streamed bytes pass it.",
    )
    http_header_timeout_seconds: float = Field(
        _HTTP.header_timeout_seconds,
        gt=0,
        le=300,
        description="The request line and headers must arrive within this of the connection "
        "opening (or of a keep-alive request's first byte), else 408 and close.",
    )
    http_body_timeout_seconds: float = Field(
        _HTTP.body_timeout_seconds,
        gt=0,
        le=3600,
        description="A request body must arrive within this of its headers, else 408 and close.",
    )
    http_write_timeout_seconds: float = Field(
        _HTTP.write_timeout_seconds,
        gt=0,
        le=3600,
        description="A client that reads nothing of a response for this long (its bytes stay "
        "buffered in the server, also when the connection is closing) has its connection aborted.",
    )
    http_request_timeout_seconds: float = Field(
        _HTTP.request_timeout_seconds,
        gt=0,
        le=300,
        description="An API request that has not started its response within this (a hung "
        "database, a stuck dependency) is answered 503 problem+json with `Retry-After`, and its "
        "handler is cancelled.",
    )
    http_keep_alive_seconds: float = Field(
        _HTTP.keep_alive_seconds,
        gt=0,
        le=300,
        description="Idle keep-alive connections close after this.",
    )
    http_max_connections: int = Field(
        _HTTP.max_connections,
        ge=1,
        le=1_000_000,
        description="Connections per API process; past it a new one gets 503 and is closed. "
        "`RLIMIT_NOFILE` is raised to fit (if the hard limit cannot, this and the backlog are "
        "lowered with one warning).",
    )
    http_backlog: int = Field(
        _HTTP.backlog,
        ge=1,
        le=65_535,
        description="Listen backlog of the API socket.",
    )

    def http_limits(self) -> HttpLimits:
        return HttpLimits.of(self)

    def database_bounds(self) -> DatabaseBounds:
        return DatabaseBounds.of(self)

    @classmethod
    def env_name(cls, field_name: str) -> str:
        """The environment variable that sets `field_name`."""
        return env_name_of(cls, field_name, cls.model_fields[field_name])


def env_name_of(cls: type[BaseSettings], field_name: str, field: FieldInfo) -> str:
    """The variable pydantic-settings reads for a field: its alias, else prefix + name."""
    alias = field.validation_alias
    if isinstance(alias, str):
        return alias.upper()
    if isinstance(alias, AliasChoices):
        return str(alias.choices[-1]).upper()
    prefix = str(cls.model_config.get("env_prefix", ""))
    return (prefix + field_name).upper()


def _one_line(cls: type[ServiceSettings], exc: ValidationError) -> str:
    by_alias = {cls.env_name(name): name for name in cls.model_fields}
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        first = str(error["loc"][0]) if error["loc"] else ""
        field = by_alias.get(first.upper(), first)
        # The attribute too, for settings passed in code rather than the environment.
        where = f"{cls.env_name(field)} ({field})" if field in cls.model_fields else first
        parts.append(f"{where}: {error['msg']}")
    return "invalid setting " + "; ".join(parts)
