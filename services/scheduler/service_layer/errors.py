"""Service-layer errors. They know nothing of HTTP; entrypoints/api/problems.py maps each class to
a problem+json status and type."""

from __future__ import annotations


class ServiceError(Exception):
    """Root of the errors a use case raises on purpose."""


class NotFound(ServiceError):
    """No such schedule for this tenant (another tenant's, deleted, or never existed look alike)."""

    def __init__(self, kind: str, id_: str) -> None:
        super().__init__(f"{kind} {id_!r} not found")
        self.kind = kind
        self.id = id_


class InvalidInput(ServiceError):
    """A value the API shape allowed but the rules do not; names the field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class VersionMismatch(ServiceError):
    """If-Match named another version, or a concurrent writer got there first."""

    def __init__(self, current_version: int | None = None) -> None:
        super().__init__("the schedule was changed by another request; fetch it and retry")
        self.current_version = current_version


class IdempotencyConflict(ServiceError):
    """The Idempotency-Key was already used with a different request body."""

    def __init__(self, key: str) -> None:
        super().__init__("this Idempotency-Key was already used with a different request body")
        self.key = key


class QuotaExceeded(ServiceError):
    """A tenant limit refuses the change; names the limit by its key and the current value, and
    (`field`) which item of a bulk request broke it."""

    def __init__(
        self, limit: str, limit_value: int, current: int, *, field: str | None = None
    ) -> None:
        where = f"{field}: " if field else ""
        super().__init__(f"{where}{limit} is {limit_value}; this request needs {current}")
        self.limit = limit
        self.limit_value = limit_value
        self.current = current
        self.field = field


class InvalidItems(ServiceError):
    """Items of a bulk request (apply) break rules: every `(field, reason)`, the field naming
    the item by its index (`schedules[3].cron`); nothing was changed."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__(f"{len(errors)} invalid: " + "; ".join(f"{f}: {r}" for f, r in errors[:3]))
        self.errors = errors


class ScheduleIsCompleted(ServiceError):
    """The schedule can never fire again (its bounds, max_runs or one-shot passed): resume and
    pause do not apply; a PATCH of its timing fields can make occurrences possible again."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            "the schedule is completed: no occurrence is left within its timing "
            "(end_at, max_runs or run_at passed); PATCH its timing fields to make it active again"
        )
        self.schedule_id = schedule_id


class NotAWebhook(ServiceError):
    """A secret operation on an event schedule: only webhook deliveries are signed."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            "the schedule's action is 'event': event schedules are not signed and have no "
            "secret to rotate; PATCH its action to 'webhook' to give it one"
        )
        self.schedule_id = schedule_id


class DuplicateKey(ServiceError):
    """Raised by repositories when a unique key is violated at commit (a concurrent twin won)."""


class KeyConflict(ServiceError):
    """Another live schedule of the tenant has this key (409 `.../key-conflict`)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"another schedule of this tenant has the key {key!r}")
        self.key = key


class TenantSuspended(ServiceError):
    """The tenant is suspended: writes are refused (403 `.../tenant-suspended`); reads work."""

    def __init__(self, tenant_id: str) -> None:
        super().__init__("the tenant is suspended; schedules can be read but not changed")
        self.tenant_id = tenant_id
