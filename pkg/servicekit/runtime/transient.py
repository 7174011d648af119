"""The one classifier of errors a worker loop retries quietly: connectivity and availability of
the database or the bus, as opposed to bugs.

Errors are matched by module and class name so that no caller (and not this package) imports a
database or Kafka driver to classify them.
"""

from __future__ import annotations

_DB_MODULES = ("sqlalchemy", "asyncpg", "aiosqlite", "sqlite3", "psycopg")
_DB_NAMES = frozenset(
    {"OperationalError", "InterfaceError", "DBAPIError", "TimeoutError", "DisconnectionError"}
)
# PostgreSQL SQLSTATEs of an unavailable, overloaded or shutting-down server, of a statement it
# cancelled (statement_timeout, 57014) and of a lock or serialization conflict worth a retry;
# every other code (a constraint, bad data, a RAISE) is not transient.
_TRANSIENT_SQLSTATE_CLASSES = frozenset({"08", "53", "57", "58"})
_TRANSIENT_SQLSTATES = frozenset({"55P03", "40001", "40P01"})
# aiokafka names its broker-side retriable errors after what went wrong; these are the ones a
# broker restart or a network partition raises.
_KAFKA_NAMES = frozenset(
    {
        "KafkaConnectionError",
        "KafkaTimeoutError",
        "NodeNotReadyError",
        "RequestTimedOutError",
        "NotLeaderForPartitionError",
        "LeaderNotAvailableError",
        "CoordinatorNotAvailableError",
        "NotCoordinatorError",
        "GroupCoordinatorNotAvailableError",
        "KafkaUnavailableError",
        "NoBrokersAvailable",
    }
)
# eventbus wraps every bus failure in these two: the bus did not take or give records.
_BUS_NAMES = frozenset({"PublishError", "ConsumeError"})


def is_database_error(exc: BaseException) -> bool:
    """An error raised by the database layer (SQLAlchemy or a driver), whose text may quote
    bound values (`servicekit.data.safe_errors` renders these without it)."""
    return type(exc).__module__.startswith(_DB_MODULES)


def raised_by_database(exc: BaseException) -> bool:
    """A database error, or an OS-level one (a refused connect, a timeout) that passed through
    the database layer's frames on its way up: what an outage of the database looks like, as
    opposed to the same OSError from another dependency (a JWKS fetch, a file)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if is_database_error(current):
            return True
        tb = current.__traceback__
        while tb is not None:
            if str(tb.tb_frame.f_globals.get("__name__", "")).startswith(_DB_MODULES):
                return True
            tb = tb.tb_next
        current = current.__cause__ or current.__context__
    return False


def is_transient(exc: BaseException) -> bool:
    """True for errors that go away when the database or the broker comes back (retry after a
    pause); False for everything else (a bug, a constraint violation, bad data)."""
    if isinstance(exc, OSError | ConnectionError | TimeoutError):
        return True
    name = type(exc).__name__
    module = type(exc).__module__
    if module.startswith(_DB_MODULES):
        if _cached_statement_invalidated(exc):
            # asyncpg: a schema change (a migration) under a prepared statement; the statement
            # was dropped (SQLAlchemy's dialect drops its whole cache), and the retry prepares it
            # anew: a settle batch is kept, not dropped, and an API request answers 503, not 500.
            return True
        code = _sqlstate(exc)
        if code is not None:  # PostgreSQL says what it was (a bare DBAPIError says nothing)
            return code[:2] in _TRANSIENT_SQLSTATE_CLASSES or code in _TRANSIENT_SQLSTATES
        return name in _DB_NAMES or "Connection" in name or "CannotConnect" in name
    if module.startswith("aiokafka"):
        return name in _KAFKA_NAMES
    if module.startswith("eventbus"):
        return name in _BUS_NAMES
    return False


def _cached_statement_invalidated(exc: BaseException) -> bool:
    """asyncpg's error, raised bare or wrapped by SQLAlchemy (a `NotSupportedError` whose `orig`
    is its dialect's `InvalidCachedStatementError`, SQLSTATE 0A000, which alone is no retry)."""
    return any(
        type(source).__name__ == "InvalidCachedStatementError"
        for source in (exc, getattr(exc, "orig", None))
    )


def _sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error (SQLAlchemy's wrapper or the driver's), if it has one."""
    for source in (exc, getattr(exc, "orig", None)):
        for attr in ("sqlstate", "pgcode"):
            code = getattr(source, attr, None)
            if isinstance(code, str) and len(code) == 5:
                return code
    return None
