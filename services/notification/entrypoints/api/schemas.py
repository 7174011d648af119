"""Request and response bodies. Timestamps are RFC 3339 UTC with `Z` (`servicekit.data.timestamps`).

Text fields refuse control characters (`servicekit.text`); a description may hold tab and
newline. In a PATCH, `null` is allowed only where it means something (clearing `description`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from notification.service_layer.ports import (
    DeliveryRecord,
    NotificationRecord,
    SubscriptionRecord,
)
from servicekit.rfc3339 import UtcTimestamp as Timestamp
from servicekit.text import NO_CONTROL_CHARS, TAB_AND_NEWLINE_ONLY
from webhookdeliver import AttemptRecord

T = TypeVar("T")

MAX_URL_CHARS = 2048
MAX_DESCRIPTION_CHARS = 500
MAX_ALERT_EMAILS = 20
# Deliberately simple: one @, no spaces, a dot in the domain. The SMTP server has the last word.
_EMAIL = re.compile(r"^[^@\s<>,;]{1,64}@[^@\s<>,;]+\.[^@\s<>,;]{2,}$")


def _email(value: str) -> str:
    value = value.strip()
    if len(value) > 254 or not _EMAIL.match(value):
        raise ValueError(f"{value!r} is not an email address")
    return value


Email = Annotated[str, Field(max_length=320), NO_CONTROL_CHARS, AfterValidator(_email)]
Url = Annotated[str, Field(min_length=1, max_length=MAX_URL_CHARS), NO_CONTROL_CHARS]
EventTypes = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=200), NO_CONTROL_CHARS]],
    Field(min_length=1, max_length=50),
]
Description = Annotated[str, Field(max_length=MAX_DESCRIPTION_CHARS), TAB_AND_NEWLINE_ONLY]
# A PATCH field left out stays unchanged; `null` is refused by the type (the schema does not
# allow it), so the default must not be validated. Typed Any only for mypy.
_ABSENT: Any = None


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None


class SubscriptionIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"url": "https://example.com/hook", "event_types": ["schedule.*"]}]
        },
    )
    url: Url
    event_types: EventTypes
    description: Description | None = None
    enabled: Annotated[bool, Field(strict=True)] = True


class SubscriptionPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: Url = _ABSENT
    event_types: EventTypes = _ABSENT
    description: Description | None = None
    enabled: Annotated[bool, Field(strict=True)] = _ABSENT


class SubscriptionOut(BaseModel):
    id: str
    url: str
    event_types: list[str]
    description: str | None
    enabled: bool
    disabled_reason: str | None
    previous_secret_expires_at: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def of(cls, sub: SubscriptionRecord) -> SubscriptionOut:
        # Same field names as the record; the stored secrets and health streak are not fields.
        return cls.model_validate(sub, from_attributes=True)


class SubscriptionWithSecretOut(SubscriptionOut):
    secret: str


class AttemptError(BaseModel):
    kind: str
    message: str | None


class AttemptOut(BaseModel):
    number: int
    started_at: Timestamp
    duration_ms: int
    status_code: int | None
    error: AttemptError | None
    response_excerpt: str | None

    @classmethod
    def of(cls, a: AttemptRecord) -> AttemptOut:
        error = AttemptError(kind=a.error_kind, message=a.error_message) if a.error_kind else None
        return cls(
            number=a.number,
            started_at=a.started_at,
            duration_ms=a.duration_ms,
            status_code=a.status_code,
            error=error,
            response_excerpt=a.response_excerpt,
        )


class DeliveryOut(BaseModel):
    id: str
    subscription_id: str
    event_id: str
    event_type: str
    status: str
    attempt_count: int
    next_attempt_at: Timestamp | None
    last_error: str | None
    created_at: Timestamp
    updated_at: Timestamp
    finished_at: Timestamp | None
    attempts: list[AttemptOut]

    @classmethod
    def of(cls, d: DeliveryRecord) -> DeliveryOut:
        return cls(
            id=d.id,
            subscription_id=d.subscription_id,
            event_id=d.event_id,
            event_type=d.event_type,
            status=d.status,
            attempt_count=d.attempt_count,
            next_attempt_at=d.next_attempt_at,
            last_error=d.last_error,
            created_at=d.created_at,
            updated_at=d.updated_at,
            finished_at=d.finished_at,
            attempts=[AttemptOut.of(a) for a in d.attempts],
        )


class AlertContactsIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"emails": ["ops@example.com"]}]}
    )
    emails: list[Email] = Field(max_length=MAX_ALERT_EMAILS)


class AlertContactsOut(BaseModel):
    emails: list[str]


class NotificationOut(BaseModel):
    id: str
    template: str
    title: str
    body: str
    data: dict[str, Any]
    read: bool
    read_at: Timestamp | None
    created_at: Timestamp

    @classmethod
    def of(cls, n: NotificationRecord) -> NotificationOut:
        return cls(
            id=n.id,
            template=n.template,
            title=n.title,
            body=n.body,
            data=n.data,
            read=n.read_at is not None,
            read_at=n.read_at,
            created_at=n.created_at,
        )
