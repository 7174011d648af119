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


def is_transient(exc: BaseException) -> bool:
    """True for errors that go away when the database or the broker comes back (retry after a
    pause); False for everything else (a bug, a constraint violation, bad data)."""
    if isinstance(exc, OSError | ConnectionError | TimeoutError):
        return True
    name = type(exc).__name__
    module = type(exc).__module__
    if module.startswith(_DB_MODULES):
        return name in _DB_NAMES or "Connection" in name or "CannotConnect" in name
    if module.startswith("aiokafka"):
        return name in _KAFKA_NAMES
    if module.startswith("eventbus"):
        return name in _BUS_NAMES
    return False
