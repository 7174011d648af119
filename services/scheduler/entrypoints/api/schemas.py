"""Request and response shapes (DESIGN.md §5). Unknown fields are refused everywhere.

Numbers and booleans are strict (`"5"` or `true` is not a number, as the schema says).
Limits and why: name 200 chars (fits a UI row and a log line); target URL 2048 bytes (the common
browser/proxy ceiling); at most 20 tenant headers, names 100 chars and values 1024 chars (the
whole set stays well under webhookdeliver's 8 KiB header budget); payload 64 KiB serialized (one
webhook body, and the default max_payload_bytes); delivery timeout 1-60 s.

The API's one mapping of a schedule definition (domain/definition.py) is here, beside its
shapes: `definition_of` (create), `changes_of` (PATCH), `timing_of` (also the preview) and
`definition_out`; `tests/scheduler/schedules/test_definition_round_trip.py` checks them against
the domain and the table field by field.

Text fields refuse control characters (`servicekit.text`), `payload` refuses NaN, Infinity and
NUL (`servicekit.data.jsonvalue`); header names are RFC 9110 tokens and values ASCII (non-ASCII is
refused, not encoded: receivers disagree on obs-text).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from scheduler.domain.definition import (
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_DESCRIPTION_CHARS,
    MAX_LABELS,
    SCHEDULE_KEY_PATTERN,
    RunPolicies,
    ScheduleDefinition,
    Target,
)
from scheduler.domain.policies import (
    BREAKER_THRESHOLD_RANGE,
    COMPLETION_TIMEOUT_RANGE,
    MAX_ATTEMPTS_RANGE,
    MIN_BACKOFF_SECONDS,
    Action,
    BreakerPolicy,
    CompletionMode,
    CompletionPolicy,
    DstAnnotation,
    DstPolicy,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
    ScheduleState,
    completion_json,
)
from scheduler.domain.timing import MAX_JITTER_SECONDS, Timing
from scheduler.service_layer.errors import InvalidInput
from servicekit.data.jsonvalue import StorableJson
from servicekit.http.problems import Problem, problem_responses
from servicekit.rfc3339 import Rfc3339, UtcTimestamp
from servicekit.text import (
    HEADER_VALUE_PATTERN,
    NO_CONTROL_CHARS,
    TAB_AND_NEWLINE_ONLY,
    TAB_ONLY,
    TOKEN_PATTERN,
    header_value_problem,
    is_token,
)
from webhookdeliver import is_reserved_header

__all__ = ["Problem", "problem_responses"]  # re-exported: the routers import them from here

MAX_NAME_CHARS = 200
MAX_URL_CHARS = 2048
MAX_HEADERS = 20
MAX_HEADER_NAME_CHARS = 100
MAX_HEADER_VALUE_CHARS = 1024
MAX_PAYLOAD_BYTES = 65_536
MAX_REASON_CHARS = 200
# A PATCH field left out of the body stays unchanged; `null` is refused by the type (the schema
# does not allow it), so the default must not be validated. Typed Any only for mypy.
_ABSENT: Any = None

# The patterns are published for clients; `_headers_allowed` enforces them with messages that
# name the header.
HeaderName = Annotated[
    str, Field(json_schema_extra={"pattern": TOKEN_PATTERN, "maxLength": MAX_HEADER_NAME_CHARS})
]
HeaderValue = Annotated[
    str,
    Field(json_schema_extra={"pattern": HEADER_VALUE_PATTERN, "maxLength": MAX_HEADER_VALUE_CHARS}),
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TargetIn(Strict):
    url: Annotated[str, Field(min_length=1, max_length=MAX_URL_CHARS), NO_CONTROL_CHARS]
    headers: Annotated[dict[HeaderName, HeaderValue], Field(max_length=MAX_HEADERS)] = Field(
        default_factory=dict
    )
    timeout_seconds: Annotated[int, Field(ge=1, le=60, strict=True)] = 10

    @field_validator("headers")
    @classmethod
    def _headers_allowed(cls, headers: dict[str, str]) -> dict[str, str]:
        seen: set[str] = set()
        for name, value in headers.items():
            lowered = name.lower()
            if len(name) > MAX_HEADER_NAME_CHARS or not is_token(name):
                raise ValueError(f"header name {name[:100]!r} is not an RFC 9110 token")
            if is_reserved_header(name):
                raise ValueError(f"header {name!r} is reserved and cannot be set")
            if lowered in seen:
                raise ValueError(f"header {name!r} appears twice (names are case-insensitive)")
            seen.add(lowered)
            problem = header_value_problem(value)
            if len(value) > MAX_HEADER_VALUE_CHARS:
                problem = f"is longer than {MAX_HEADER_VALUE_CHARS} characters"
            if problem is not None:
                raise ValueError(f"header {name!r} value {problem}")
        return headers


class RetryPolicyIn(Strict):
    max_attempts: Annotated[
        int, Field(ge=MAX_ATTEMPTS_RANGE[0], le=MAX_ATTEMPTS_RANGE[1], strict=True)
    ] = 5
    initial_backoff_seconds: Annotated[
        float, Field(ge=MIN_BACKOFF_SECONDS, allow_inf_nan=False, strict=True)
    ] = 10.0
    max_backoff_seconds: Annotated[
        float, Field(ge=MIN_BACKOFF_SECONDS, allow_inf_nan=False, strict=True)
    ] = 3600.0
    multiplier: Annotated[float, Field(allow_inf_nan=False, strict=True)] = 2.0
    max_retry_duration_seconds: Annotated[float, Field(allow_inf_nan=False, strict=True)] = 86_400.0


class BreakerIn(Strict):
    failure_threshold: Annotated[
        int, Field(ge=BREAKER_THRESHOLD_RANGE[0], le=BREAKER_THRESHOLD_RANGE[1], strict=True)
    ] = 5


class CompletionIn(Strict):
    """What ends a webhook run (DESIGN.md §7b): `response` (a 2xx) or `callback` (a 2xx means
    accepted; the receiver calls `X-Run-Complete-Url` by `timeout_seconds`)."""

    mode: CompletionMode = CompletionMode.RESPONSE
    timeout_seconds: (
        Annotated[
            int,
            Field(
                ge=COMPLETION_TIMEOUT_RANGE[0],
                le=COMPLETION_TIMEOUT_RANGE[1],
                strict=True,
                description="callback mode: how long after accepting the receiver may take "
                "to call back; no call by then is a failed attempt (completion_timeout)",
            ),
        ]
        | None
    ) = None
    min_duration_seconds: (
        Annotated[
            int,
            Field(
                ge=0,
                strict=True,
                description="callback mode: a completion sooner than this after the attempt "
                "started marks the run too_fast (an event and an alert)",
            ),
        ]
        | None
    ) = None


class CompletionOut(BaseModel):
    mode: CompletionMode
    timeout_seconds: int | None = None
    min_duration_seconds: int | None = None


def _payload_size_ok(value: Any) -> Any:
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload is {size} bytes serialized; the limit is {MAX_PAYLOAD_BYTES}")
    return value


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), NO_CONTROL_CHARS]
# A tab may separate fields (DESIGN.md §7, as the CLI reads it); other control characters not.
CronText = Annotated[str, Field(min_length=1, max_length=200), TAB_ONLY]
ZoneText = Annotated[str, Field(min_length=1, max_length=64), NO_CONTROL_CHARS]
Description = Annotated[
    str,
    Field(max_length=MAX_DESCRIPTION_CHARS, description="free text for people"),
    TAB_AND_NEWLINE_ONLY,  # notification's descriptions follow the same rule
]
# Timing fields (DESIGN.md §7a); instants need an offset (a naive one is a 422 naming the field).
RunAt = Annotated[
    Rfc3339,
    Field(description="one-shot: the single occurrence (whole seconds), instead of cron"),
]
StartAt = Annotated[Rfc3339, Field(description="no occurrence before this instant")]
EndAt = Annotated[Rfc3339, Field(description="no occurrence after this instant")]
MaxRuns = Annotated[
    int,
    Field(
        ge=1, strict=True, description="at most this many planned occurrences (skipped ones count)"
    ),
]
JitterSeconds = Annotated[
    int,
    Field(
        ge=0,
        strict=True,
        le=MAX_JITTER_SECONDS,
        description="each run's due_at is scheduled_for plus a fixed offset in [0, this]; "
        "smaller than the schedule's smallest gap",
    ),
]


LabelKey = Annotated[str, Field(pattern=LABEL_KEY_PATTERN, max_length=63)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=63)]
Labels = Annotated[
    dict[LabelKey, LabelValue],
    Field(
        max_length=MAX_LABELS,
        description=f"at most {MAX_LABELS} pairs to filter by (`?label=k=v`, `?label=k`); a key "
        f"matches `{LABEL_KEY_PATTERN}`, a value `{LABEL_VALUE_PATTERN}`",
    ),
]
ScheduleKey = Annotated[
    str,
    Field(
        pattern=SCHEDULE_KEY_PATTERN,
        max_length=128,
        description="the tenant's own id for the schedule, unique among its live schedules "
        f"(409 key-conflict); `{SCHEDULE_KEY_PATTERN}`; set on create, never changed",
    ),
]
# A tenant-supplied signing secret: 24-64 bytes, so it is at least as strong as HMAC-SHA256
# wants (Standard Webhooks) and bounded.
SECRET_BYTES_RANGE = (24, 64)
SECRET_PATTERN = r"^whsec_[A-Za-z0-9+/]+={0,2}$"


def _secret_ok(value: str) -> str:
    low, high = SECRET_BYTES_RANGE
    body = value.removeprefix("whsec_")
    try:
        raw = base64.b64decode(body, validate=True) if body != value else None
    except (binascii.Error, ValueError):
        raw = None
    if raw is None or not low <= len(raw) <= high:
        raise ValueError(f"must be 'whsec_' + standard base64 of {low}-{high} bytes")
    return value


SuppliedSecret = Annotated[
    str,
    Field(
        max_length=100,
        json_schema_extra={"pattern": SECRET_PATTERN},
        description="a signing secret of your own, `whsec_` + standard base64 of 24-64 bytes "
        "(webhook schedules only); never returned. Left out on create, one is generated and "
        "shown once; on PUT by key it replaces the current one",
    ),
]


class TimingIn(Strict):
    """The timing fields a schedule and a stateless preview share."""

    cron: CronText | None = None
    run_at: RunAt | None = None
    timezone: ZoneText
    dst_policy: DstPolicy = DstPolicy.SHIFT
    start_at: StartAt | None = None
    end_at: EndAt | None = None
    max_runs: MaxRuns | None = None
    jitter_seconds: JitterSeconds = 0


class PreviewIn(TimingIn):
    after: Rfc3339 | None = Field(
        default=None, description="occurrences strictly after this instant (default: now)"
    )
    count: Annotated[int, Field(ge=1, le=100, strict=True)] = 10


class ScheduleCreate(Strict):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "nightly-report",
                    "cron": "0 3 * * 1-5",
                    "timezone": "Africa/Addis_Ababa",
                    "action": "webhook",
                    "target": {"url": "https://example.com/hook"},
                    "payload": {"report": "daily"},
                }
            ]
        }
    )
    name: Name
    description: Description | None = None
    cron: CronText | None = None
    run_at: RunAt | None = None
    timezone: ZoneText
    dst_policy: DstPolicy = DstPolicy.SHIFT
    start_at: StartAt | None = None
    end_at: EndAt | None = None
    max_runs: MaxRuns | None = None
    jitter_seconds: JitterSeconds = 0
    action: Action = Action.WEBHOOK
    target: TargetIn | None = None
    payload: StorableJson = None
    retry_policy: RetryPolicyIn = Field(default_factory=RetryPolicyIn)
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    overlap_policy: OverlapPolicy = OverlapPolicy.ALLOW
    breaker: BreakerIn = Field(default_factory=BreakerIn)
    completion: CompletionIn = Field(default_factory=CompletionIn)
    labels: Labels = Field(default_factory=dict)
    key: ScheduleKey | None = None
    secret: SuppliedSecret | None = None

    _payload = field_validator("payload")(_payload_size_ok)
    _secret = field_validator("secret")(lambda v: None if v is None else _secret_ok(v))


class SchedulePatch(Strict):
    """Partial update: fields present replace the stored value whole (target, policies too)."""

    name: Name = _ABSENT
    description: Description | None = None
    cron: CronText | None = None
    run_at: RunAt | None = None
    timezone: ZoneText = _ABSENT
    dst_policy: DstPolicy = _ABSENT
    start_at: StartAt | None = None
    end_at: EndAt | None = None
    max_runs: MaxRuns | None = None
    jitter_seconds: JitterSeconds = _ABSENT
    action: Action = _ABSENT
    target: TargetIn | None = None
    payload: StorableJson = None
    retry_policy: RetryPolicyIn = _ABSENT
    misfire_policy: MisfirePolicy = _ABSENT
    overlap_policy: OverlapPolicy = _ABSENT
    breaker: BreakerIn = _ABSENT
    completion: CompletionIn = _ABSENT
    labels: Labels = _ABSENT

    _payload = field_validator("payload")(_payload_size_ok)


class PauseIn(Strict):
    reason: Annotated[str, Field(max_length=MAX_REASON_CHARS), NO_CONTROL_CHARS] | None = None


class TargetOut(BaseModel):
    url: str
    headers: dict[str, str]
    timeout_seconds: int


class RetryPolicyOut(BaseModel):
    max_attempts: int
    initial_backoff_seconds: float
    max_backoff_seconds: float
    multiplier: float
    max_retry_duration_seconds: float


class BreakerOut(BaseModel):
    failure_threshold: int


class RunErrorOut(BaseModel):
    kind: str
    message: str | None


class LastRunOut(BaseModel):
    """The schedule's last finished run: the newest (by scheduled_for) that succeeded or failed.
    Runs planned ahead (pending) are not finished; skipped runs never reached the target."""

    id: str
    scheduled_for: UtcTimestamp
    trigger: str
    status: str = Field(description="succeeded or failed")
    finished_at: UtcTimestamp | None
    attempt_count: int
    status_code: int | None = Field(description="its last attempt's HTTP status, if any")
    error: RunErrorOut | None = Field(description="its last attempt's error, if any")
    response_excerpt: str | None = Field(
        description="the start of the receiver's answer to its last attempt (at most 1 KiB)"
    )


class DefinitionOut(BaseModel):
    """A schedule's definition (the fields a create or PUT by key takes); a schedule, and each of
    its versions, answers it."""

    name: str
    description: str | None
    cron: str | None
    run_at: UtcTimestamp | None
    timezone: str
    dst_policy: DstPolicy
    start_at: UtcTimestamp | None
    end_at: UtcTimestamp | None
    max_runs: int | None
    jitter_seconds: int
    action: Action
    target: TargetOut | None
    payload: JsonValue
    retry_policy: RetryPolicyOut
    misfire_policy: MisfirePolicy
    overlap_policy: OverlapPolicy
    breaker: BreakerOut
    completion: CompletionOut
    labels: dict[str, str]


class _Identified(BaseModel):
    id: str


class ScheduleOut(DefinitionOut, _Identified):  # id first, then the definition
    key: str | None = Field(description="the tenant's own id for the schedule, if it has one")
    state: ScheduleState
    paused_reason: str | None
    next_run_at: UtcTimestamp | None = Field(
        description="the next occurrence not yet planned (runs are planned ahead of time, so "
        "the next to run may be earlier: see next_occurrence_at)"
    )
    created_at: UtcTimestamp
    updated_at: UtcTimestamp
    version: int
    last_run: LastRunOut | None = Field(
        description="the last finished run (succeeded or failed); null before the first"
    )
    next_occurrence_at: UtcTimestamp | None = Field(
        description="the next occurrence that has not run yet: the earliest run planned ahead "
        "and not yet attempted, else next_run_at; null while paused and when none is left"
    )
    consecutive_failures: int = Field(
        description="failed runs in a row (the breaker pauses at breaker.failure_threshold)"
    )


class ScheduleWithSecret(ScheduleOut):
    secret: str | None = Field(
        description="the webhook signing secret, shown only here: on create (and the PUT by "
        "key that creates or makes a webhook), on rotate, and on the PATCH that makes an event "
        "schedule a webhook; null for an event schedule (nothing is signed), for a secret the "
        "request supplied (never returned) and on any other update"
    )


class ScheduleList(BaseModel):
    items: list[ScheduleOut]
    next_cursor: str | None


class OccurrenceOut(BaseModel):
    """An annotated occurrence (DESIGN.md §7a)."""

    at: str = Field(description="local wall time with the zone's UTC offset")
    utc: UtcTimestamp
    dst: DstAnnotation | None = Field(
        description="shifted: stands for wall time(s) that did not exist; first_pass / "
        "second_pass: its wall time occurs twice that day; null: DST did not touch it"
    )
    due_at: UtcTimestamp | None = Field(
        default=None, description="scheduled_for plus jitter; present only with jitter"
    )

    @model_serializer(mode="wrap")
    def _without_absent_due_at(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("due_at") is None:
            data.pop("due_at", None)
        return data


class OccurrencesOut(BaseModel):
    timezone: str
    items: list[OccurrenceOut]


# ---- the API's mapping of a schedule definition ----------------------------------------------


class _TimingFields(Protocol):
    timezone: str
    cron: str | None
    run_at: datetime | None
    dst_policy: DstPolicy
    start_at: datetime | None
    end_at: datetime | None
    max_runs: int | None
    jitter_seconds: int


def timing_of(body: _TimingFields) -> Timing:
    return Timing(
        timezone=body.timezone,
        cron=body.cron,
        run_at=body.run_at,
        dst_policy=body.dst_policy,
        start_at=body.start_at,
        end_at=body.end_at,
        max_runs=body.max_runs,
        jitter_seconds=body.jitter_seconds,
    )


def target_of(t: TargetIn | None) -> Target | None:
    """The target as given (its URL's reachability is the router's check)."""
    return None if t is None else Target(t.url, dict(t.headers), t.timeout_seconds)


def _retry_policy(p: RetryPolicyIn) -> RetryPolicy:
    return RetryPolicy(**p.model_dump())


def _breaker(p: BreakerIn) -> BreakerPolicy:
    return BreakerPolicy(**p.model_dump())


def _completion(p: CompletionIn) -> CompletionPolicy:
    return CompletionPolicy(p.mode, p.timeout_seconds, p.min_duration_seconds)


def definition_of(body: ScheduleCreate) -> ScheduleDefinition:
    return ScheduleDefinition(
        name=body.name,
        description=body.description,
        timing=timing_of(body),
        action=body.action,
        target=target_of(body.target),
        payload=body.payload,
        policies=RunPolicies(
            retry_policy=_retry_policy(body.retry_policy),
            misfire_policy=body.misfire_policy,
            overlap_policy=body.overlap_policy,
            breaker=_breaker(body.breaker),
            completion=_completion(body.completion),
        ),
        labels=dict(body.labels),
    )


# `null` clears these (cron / run_at: a PATCH switching between them sends the other as null).
_NULLABLE = {"target", "payload", "description", "cron", "run_at", "start_at", "end_at", "max_runs"}
# PATCH fields whose request shape is not the domain's value.
_PATCH_VALUE: dict[str, Callable[[Any], Any]] = {
    "target": target_of,
    "retry_policy": _retry_policy,
    "breaker": _breaker,
    "completion": _completion,
    "labels": dict,
}


def changes_of(body: SchedulePatch) -> dict[str, Any]:
    """The fields the PATCH sent, as domain values by their flat names
    (`ScheduleDefinition.with_changes`)."""
    changes: dict[str, Any] = {}
    for name in body.model_fields_set:
        value = getattr(body, name)
        if value is None and name not in _NULLABLE:
            raise InvalidInput(name, "may not be null")
        convert = _PATCH_VALUE.get(name)
        changes[name] = value if convert is None or value is None else convert(value)
    return changes


def _utc(dt: datetime | None) -> datetime | None:
    return None if dt is None else dt.astimezone(UTC)


def definition_out(d: ScheduleDefinition) -> dict[str, Any]:
    """The definition's fields of a `ScheduleOut`."""
    t, p = d.timing, d.policies
    return {
        "name": d.name,
        "description": d.description,
        "cron": t.cron,
        "run_at": _utc(t.run_at),
        "timezone": t.timezone,
        "dst_policy": t.dst_policy,
        "start_at": _utc(t.start_at),
        "end_at": _utc(t.end_at),
        "max_runs": t.max_runs,
        "jitter_seconds": t.jitter_seconds,
        "action": d.action,
        "target": None
        if d.target is None
        else {
            "url": d.target.url,
            "headers": dict(d.target.headers),
            "timeout_seconds": d.target.timeout_seconds,
        },
        "payload": d.payload,
        "retry_policy": asdict(p.retry_policy),
        "misfire_policy": p.misfire_policy,
        "overlap_policy": p.overlap_policy,
        "breaker": asdict(p.breaker),
        "completion": completion_json(p.completion),
        "labels": dict(d.labels),
    }
