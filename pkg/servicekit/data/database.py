"""The one async engine factory of both services: every database call is bounded, and no bound
SQL parameter is ever part of an error message.

PostgreSQL (asyncpg) gets a bound on each stage of a call:

- connect: `connect_timeout_seconds` for the TCP connect plus the startup handshake;
- pool checkout: `pool_timeout_seconds` waiting for a free connection;
- every round trip (query, prepare, BEGIN/COMMIT, the ping): asyncpg's `command_timeout`,
  `command_timeout_seconds`, which also ends a call on a connection that hangs (open, silent);
- server side (`server_settings`): `statement_timeout`, `lock_timeout` and
  `idle_in_transaction_session_timeout`, so the server cancels a slow statement first (with a
  clean error) and frees what a vanished client left behind; TCP keepalives let it notice a dead
  peer within about a minute.

SQLite has no network to hang: its connect timeout is its busy timeout (`SQLITE_BUSY_SECONDS`,
waiting for another writer), and checkout waits at most `pool_timeout_seconds` (with a single
connection, which is the write lock, at least `SQLITE_BUSY_SECONDS`).

`hide_parameters=True` keeps bound values out of SQLAlchemy's error messages (a failing insert
would otherwise print the tenant's header values and ciphertexts); `servicekit.logging` renders
database errors without their driver messages too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

SQLITE_BUSY_SECONDS = 30.0
"""How long a SQLite connection waits for another writer's lock before "database is locked"."""
MIGRATION_STATEMENT_SECONDS = 1800.0
"""Statement bound of migrations (an index build or a backfill may take minutes)."""
_KEEPALIVE = {"tcp_keepalives_idle": "30", "tcp_keepalives_interval": "10"}
_KEEPALIVE_COUNT = "3"


@dataclass(frozen=True)
class DatabaseBounds:
    """Time bounds of every database call (seconds; 0 for the server-side ones disables them)."""

    connect_timeout_seconds: float = 5.0
    command_timeout_seconds: float = 20.0
    """Client-side bound of one round trip; above the statement timeout so that a merely slow
    statement is cancelled by the server (a clean error) before the client gives up."""
    statement_timeout_seconds: float = 15.0
    lock_timeout_seconds: float = 10.0
    idle_in_transaction_timeout_seconds: float = 60.0
    pool_timeout_seconds: float = 10.0

    def __post_init__(self) -> None:
        if min(self.connect_timeout_seconds, self.command_timeout_seconds) <= 0:
            raise ValueError("connect and command timeouts must be > 0")
        if self.pool_timeout_seconds <= 0:
            raise ValueError("pool_timeout_seconds must be > 0")
        server = (
            self.statement_timeout_seconds,
            self.lock_timeout_seconds,
            self.idle_in_transaction_timeout_seconds,
        )
        if min(server) < 0:
            raise ValueError("server-side timeouts must be >= 0")

    @classmethod
    def of(cls, settings: object) -> DatabaseBounds:
        """From a service's settings, whose fields are these names prefixed `db_`."""
        return cls(**{f.name: getattr(settings, f"db_{f.name}") for f in fields(cls)})

    def for_migrations(self) -> DatabaseBounds:
        """Migrations keep the connect, lock and checkout bounds but may run long statements."""
        statement = max(self.statement_timeout_seconds, MIGRATION_STATEMENT_SECONDS)
        return replace(
            self,
            statement_timeout_seconds=statement,
            command_timeout_seconds=max(self.command_timeout_seconds, statement + 30.0),
        )

    def server_settings(self) -> dict[str, str]:
        """PostgreSQL session settings (milliseconds, as strings, for asyncpg)."""

        def ms(seconds: float) -> str:
            return str(round(seconds * 1000))

        return {
            "statement_timeout": ms(self.statement_timeout_seconds),
            "lock_timeout": ms(self.lock_timeout_seconds),
            "idle_in_transaction_session_timeout": ms(self.idle_in_transaction_timeout_seconds),
            **_KEEPALIVE,
            "tcp_keepalives_count": _KEEPALIVE_COUNT,
        }


def create_bounded_engine(
    url: str,
    bounds: DatabaseBounds | None = None,
    *,
    pool_size: int = 10,
    sqlite_single_connection: bool = False,
    sqlite_pragmas: Sequence[str] = (),
) -> AsyncEngine:
    """An AsyncEngine for `url` with `bounds` on every call. SQLite: WAL and foreign keys on,
    plus `sqlite_pragmas` ("synchronous=NORMAL"); `sqlite_single_connection` gives the pool one
    connection, so that every transaction queues for it (a single writer)."""
    bounds = bounds or DatabaseBounds()
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() != "asyncpg":
        # The dispatchers' hot path runs on asyncpg itself (`asyncpg_connection`).
        raise ValueError(
            f"PostgreSQL URLs must use the asyncpg driver (postgresql+asyncpg://), "
            f"not {parsed.drivername!r}"
        )
    kwargs: dict[str, Any] = {
        "hide_parameters": True,
        "pool_timeout": bounds.pool_timeout_seconds,
    }
    sqlite = parsed.get_backend_name() == "sqlite"
    if sqlite:
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        if sqlite_single_connection:
            # The one connection is the write lock: waiting for it is waiting for the writer,
            # bounded like SQLite's own busy wait.
            kwargs.update(
                pool_size=1,
                max_overflow=0,
                pool_timeout=max(bounds.pool_timeout_seconds, SQLITE_BUSY_SECONDS),
            )
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_SECONDS}
    else:
        kwargs.update(pool_size=pool_size, max_overflow=pool_size)
        if parsed.get_driver_name() == "asyncpg":
            kwargs["connect_args"] = {
                "timeout": bounds.connect_timeout_seconds,
                "command_timeout": bounds.command_timeout_seconds,
                "server_settings": bounds.server_settings(),
            }
    engine = create_async_engine(url, **kwargs)
    if not sqlite:
        _ping_idle_connections(engine)
    if sqlite:
        pragmas = ("journal_mode=WAL", "foreign_keys=ON", *sqlite_pragmas)

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            for pragma in pragmas:
                cursor.execute(f"PRAGMA {pragma}")
            cursor.close()

    return engine


INDEX_PATHS_SQL = (
    "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)"
)
"""SET LOCAL for a transaction whose statements must keep their index paths on tables a burst
has just grown (statistics of the table as it was before: the planner takes it for a few rows
and scans it whole). Every statement it serves is an index range by construction."""

CLAIM_PLANNER_SQL = INDEX_PATHS_SQL + ", set_config('plan_cache_mode', 'force_generic_plan', true)"
"""The planner settings of the dispatchers' claim transactions on PostgreSQL (SET LOCAL, one
round trip, sent first): index paths only, and generic plans (`GENERIC_PLANS_SQL`). Statistics
are stale in exactly the case that matters, a burst of new due rows, and with them the planner
bitmap- or sequential-scanned every due row on each claim (measured: 80 ms per claim of 78 runs
during a 10,000-run burst; ~100x slower at 10,000 due deliveries)."""

GENERIC_PLANS_SQL = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
"""For the hot-path statements (claim, settle), SET LOCAL: run each prepared statement on its
one generic plan. Their plans do not depend on the values (partial-index predicates are
literals), but PostgreSQL kept planning them afresh for every execution, judging the generic
plan's estimate dearer: 0.5-0.6 ms of planning per claim and per settle, 12-15 us of PostgreSQL
CPU per run at 100 runs a statement (pg_stat_statements, dispatch bench). Followed by
`CONFIGURED_PLANS_SQL` where other statements share the transaction."""

CONFIGURED_PLANS_SQL = "SET LOCAL plan_cache_mode TO DEFAULT"
"""Back to the configured plan choice for the rest of a transaction."""

PING_AFTER_IDLE_SECONDS = 5.0
"""A pooled connection idle for longer is pinged at checkout (a dead one is replaced there)."""


def _ping_idle_connections(engine: AsyncEngine) -> None:
    """SQLAlchemy's pool_pre_ping, for connections idle longer than PING_AFTER_IDLE_SECONDS
    only: its ping is three round trips (BEGIN, a query, ROLLBACK) on every checkout, which cost
    the dispatchers as much as the statements of a claim. A connection back in the pool a moment
    ago is as alive as its last statement showed; if the server went away meanwhile, the first
    statement fails as a disconnect, the pool drops that connection, and callers retry (every
    worker loop and API request treats it as the outage it is)."""

    @event.listens_for(engine.sync_engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_SECONDS:
            return  # new (it just connected), or in use a moment ago
        try:
            dbapi_connection.ping()
        except Exception as exc:
            # The pool discards this connection and checks out (or opens) another.
            raise DisconnectionError("idle connection failed its ping") from exc


async def asyncpg_connection(conn: AsyncConnection) -> Any:
    """The asyncpg connection under `conn` (PostgreSQL on asyncpg), inside `conn`'s transaction.

    The dispatchers' hot statements go to asyncpg directly: its prepared-statement cache, no
    SQLAlchemy compile, parameter or row processing per call. They run in the unit of work's
    transaction like its other statements: SQLAlchemy begins its asyncpg transaction at the
    first statement it executes, so one not begun yet is begun here (the same BEGIN, at the
    connection's isolation level), and commit, rollback and the bounds (`command_timeout`, the
    server-side timeouts) apply to them unchanged."""
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    if conn.in_transaction() and not driver.is_in_transaction():
        adapted: Any = raw.dbapi_connection
        await adapted._start_transaction()  # what SQLAlchemy's asyncpg adapter does lazily
        # Never run a claim's locks in autocommit, nor in a transaction the adapter would not
        # commit (its commit and rollback act on the transaction it began).
        if not driver.is_in_transaction() or getattr(adapted, "_transaction", None) is None:
            raise RuntimeError("the unit of work's transaction did not begin on asyncpg")
    return driver
