"""Request and response shapes (DESIGN.md §5). Unknown fields are refused everywhere.

Limits and why: name 200 chars (fits a UI row and a log line); target URL 2048 bytes (the common
browser/proxy ceiling); at most 20 tenant headers, names 100 chars and values 1024 chars (the
whole set stays well under webhookdeliver's 8 KiB header budget); payload 64 KiB serialized (one
webhook body, and the default max_payload_bytes); delivery timeout 1-60 s.
"""

from __future__ import annotations

import json
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from scheduler.domain.policies import (
    BREAKER_THRESHOLD_RANGE,
    MAX_ATTEMPTS_RANGE,
    MIN_BACKOFF_SECONDS,
    Action,
    MisfirePolicy,
    OverlapPolicy,
    ScheduleState,
)
from webhookdeliver import RESERVED_HEADERS

MAX_NAME_CHARS = 200
MAX_URL_CHARS = 2048
MAX_HEADERS = 20
MAX_HEADER_NAME_CHARS = 100
MAX_HEADER_VALUE_CHARS = 1024
MAX_PAYLOAD_BYTES = 65_536
MAX_REASON_CHARS = 200
_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TargetIn(Strict):
    url: Annotated[str, Field(min_length=1, max_length=MAX_URL_CHARS)]
    headers: Annotated[dict[str, str], Field(max_length=MAX_HEADERS)] = Field(default_factory=dict)
    timeout_seconds: Annotated[int, Field(ge=1, le=60)] = 10

    @field_validator("headers")
    @classmethod
    def _headers_allowed(cls, headers: dict[str, str]) -> dict[str, str]:
        seen: set[str] = set()
        for name, value in headers.items():
            lowered = name.lower()
            if not name or len(name) > MAX_HEADER_NAME_CHARS or not set(name) <= _TOKEN_CHARS:
                raise ValueError(f"header name {name[:100]!r} is not a valid HTTP field name")
            if lowered in RESERVED_HEADERS or lowered.startswith("webhook-"):
                raise ValueError(f"header {name!r} is reserved and cannot be set")
            if lowered in seen:
                raise ValueError(f"header {name!r} appears twice (names are case-insensitive)")
            seen.add(lowered)
            if len(value) > MAX_HEADER_VALUE_CHARS or any(c in value for c in "\r\n\x00"):
                raise ValueError(
                    f"header {name!r} value must be at most {MAX_HEADER_VALUE_CHARS} chars "
                    "without CR, LF or NUL"
                )
        return headers


class RetryPolicyIn(Strict):
    max_attempts: Annotated[int, Field(ge=MAX_ATTEMPTS_RANGE[0], le=MAX_ATTEMPTS_RANGE[1])] = 5
    initial_backoff_seconds: Annotated[
        float, Field(ge=MIN_BACKOFF_SECONDS, allow_inf_nan=False)
    ] = 10.0
    max_backoff_seconds: Annotated[float, Field(ge=MIN_BACKOFF_SECONDS, allow_inf_nan=False)] = (
        3600.0
    )
    multiplier: Annotated[float, Field(allow_inf_nan=False)] = 2.0
    max_retry_duration_seconds: Annotated[float, Field(allow_inf_nan=False)] = 86_400.0


class BreakerIn(Strict):
    failure_threshold: Annotated[
        int, Field(ge=BREAKER_THRESHOLD_RANGE[0], le=BREAKER_THRESHOLD_RANGE[1])
    ] = 5


def _payload_size_ok(value: Any) -> Any:
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload is {size} bytes serialized; the limit is {MAX_PAYLOAD_BYTES}")
    return value


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
CronText = Annotated[str, Field(min_length=1, max_length=200)]
ZoneText = Annotated[str, Field(min_length=1, max_length=64)]


class ScheduleCreate(Strict):
    name: Name
    cron: CronText
    timezone: ZoneText
    action: Action = Action.WEBHOOK
    target: TargetIn | None = None
    payload: JsonValue = None
    retry_policy: RetryPolicyIn = Field(default_factory=RetryPolicyIn)
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    overlap_policy: OverlapPolicy = OverlapPolicy.ALLOW
    breaker: BreakerIn = Field(default_factory=BreakerIn)

    _payload = field_validator("payload")(_payload_size_ok)


class SchedulePatch(Strict):
    """Partial update: fields present replace the stored value whole (target, policies too)."""

    name: Name | None = None
    cron: CronText | None = None
    timezone: ZoneText | None = None
    action: Action | None = None
    target: TargetIn | None = None
    payload: JsonValue = None
    retry_policy: RetryPolicyIn | None = None
    misfire_policy: MisfirePolicy | None = None
    overlap_policy: OverlapPolicy | None = None
    breaker: BreakerIn | None = None

    _payload = field_validator("payload")(_payload_size_ok)


class PauseIn(Strict):
    reason: Annotated[str, Field(max_length=MAX_REASON_CHARS)] | None = None


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


class ScheduleOut(BaseModel):
    id: str
    name: str
    cron: str
    timezone: str
    action: Action
    target: TargetOut | None
    payload: JsonValue
    retry_policy: RetryPolicyOut
    misfire_policy: MisfirePolicy
    overlap_policy: OverlapPolicy
    breaker: BreakerOut
    state: ScheduleState
    paused_reason: str | None
    next_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    version: int


class ScheduleWithSecret(ScheduleOut):
    secret: str = Field(description="the signing secret; shown only on create and rotate")


class ScheduleList(BaseModel):
    items: list[ScheduleOut]
    next_cursor: str | None


class OccurrencesOut(BaseModel):
    timezone: str
    items: list[str] = Field(description="local wall time with the zone's UTC offset")


class Problem(BaseModel):
    """RFC 9457 problem details (extension members vary by type)."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str | None = None


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for error statuses: the Problem schema under `application/problem+json`,
    the media type every error is sent with (FastAPI's `model=` files it under application/json)."""
    content = {"application/problem+json": {"schema": Problem.model_json_schema()}}
    return {s: {"description": HTTPStatus(s).phrase, "content": content} for s in statuses}
