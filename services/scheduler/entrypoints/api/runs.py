"""/v1/schedules/{id}/trigger and /runs routes (DESIGN.md §5): trigger (202), run history with
filters and a cursor, one run with its attempts in attempt order, replay (202), and the tenant's
history across schedules, `GET /v1/schedules/-/runs` (`-` = any schedule, AIP-159).

Dead letters are `GET /v1/schedules/{id}/runs?status=failed` (`/-/runs?status=failed` for all).
Another tenant's schedule or run answers 404 exactly like a missing one. `install_runs(app, ...)`
mounts the router and the context it needs (the unit-of-work factory, the clock, and a wake-up
for an in-process dispatcher).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Path, Query, Request
from pydantic import BaseModel, Field, JsonValue

from authclient import Principal
from authclient.fastapi import require
from scheduler.domain.run import Attempt, Run, RunStatus, Trigger
from scheduler.domain.tenant import DEFAULT_ENTITLEMENTS, Entitlements
from scheduler.entrypoints.api import backfill
from scheduler.entrypoints.api.context import RunsApiContext, require_writer, runs_context_of
from scheduler.entrypoints.api.schemas import problem_responses
from scheduler.service_layer import run_stats as stats_svc
from scheduler.service_layer import runs as svc
from scheduler.service_layer.errors import InvalidInput
from scheduler.service_layer.run_ports import RunPageFilter
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from servicekit.rfc3339 import Rfc3339, UtcTimestamp
from servicekit.text import NO_CONTROL_CHARS

READ = "schedules:read"
WRITE = "schedules:write"

router = APIRouter(
    prefix="/v1/schedules", tags=["runs"], responses=problem_responses(401, 403, 404, 422, 503)
)

IdPath = Annotated[
    str, Path(min_length=1, max_length=64, description="schedule id"), NO_CONTROL_CHARS
]
RunIdPath = Annotated[
    str, Path(min_length=1, max_length=64, description="run id"), NO_CONTROL_CHARS
]
# Query instants are RFC 3339 with an offset (`to=0.5` is not a date-time).
Instant = Annotated[Rfc3339 | None, Query(description="RFC 3339 date-time with an offset")]


def install_runs(
    app: FastAPI,
    uows: UnitOfWorkFactory,
    clock: Callable[[], datetime],
    wake: Callable[[], None] | None = None,
    default_limits: Entitlements = DEFAULT_ENTITLEMENTS,
) -> None:
    app.state.runs_ctx = RunsApiContext(uows, clock, wake, default_limits)
    app.include_router(router)
    app.include_router(backfill.router)


class ErrorOut(BaseModel):
    kind: str
    message: str | None


class AttemptOut(BaseModel):
    number: int
    started_at: UtcTimestamp
    duration_ms: int
    status_code: int | None
    error: ErrorOut | None
    response_excerpt: str | None
    completed_at: UtcTimestamp | None = Field(
        default=None,
        description="callback mode: when this accepted attempt's awaiting ended (its "
        "completion call, or the deadline: error completion_timeout)",
    )
    completion_detail: str | None = Field(
        default=None, description="callback mode: the completion call's detail"
    )
    completion_output: JsonValue = Field(
        default=None, description="callback mode: the completion call's output (<= 16 KiB)"
    )


class RunOut(BaseModel):
    id: str
    schedule_id: str
    scheduled_for: UtcTimestamp
    due_at: UtcTimestamp = Field(
        description="when the first attempt may start: scheduled_for plus the schedule's jitter"
    )
    trigger: Literal["schedule", "manual", "replay", "backfill"]
    status: Literal["pending", "in_progress", "retrying", "succeeded", "failed", "skipped"]
    skip_reason: str | None
    attempt_count: int
    next_attempt_at: UtcTimestamp | None
    started_at: UtcTimestamp | None
    finished_at: UtcTimestamp | None
    replay_of: str | None = Field(
        default=None, description="a replay run: the id of the run it replays (same schedule)"
    )
    schedule_version: int | None = Field(
        default=None,
        description="the schedule's version that planned the run (manual, replay, backfill: "
        "the version current when asked for; GET /v1/schedules/{id}/versions/{n}); null on "
        "runs from before versions were recorded",
    )
    completion_deadline: UtcTimestamp | None = Field(
        default=None,
        description="callback mode: set while the accepted attempt awaits its completion call "
        "(status in_progress): no call by then is a failed attempt (completion_timeout)",
    )
    completed_at: UtcTimestamp | None = Field(
        default=None, description="callback mode: when the last completion call ended an attempt"
    )
    completion_detail: str | None = Field(
        default=None, description="callback mode: the last completion call's detail"
    )
    completion_output: JsonValue = Field(
        default=None, description="callback mode: the last completion call's output (<= 16 KiB)"
    )
    too_fast: bool = Field(
        default=False,
        description="callback mode: it completed sooner than completion.min_duration_seconds "
        "(it still succeeded; schedule.run.too_fast was emitted and the tenant alerted)",
    )


class RunWithAttempts(RunOut):
    attempts: list[AttemptOut]


class RunListItem(RunOut):
    last_status_code: int | None = Field(
        default=None, description="the newest attempt's HTTP status; null without one"
    )
    last_error: ErrorOut | None = Field(
        default=None, description="the newest attempt's error; null without one or on success"
    )


class RunList(BaseModel):
    items: list[RunListItem]
    next_cursor: str | None


def _utc(dt: datetime | None) -> datetime | None:
    return None if dt is None else dt.astimezone(UTC)


def run_out(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "schedule_id": run.schedule_id,
        "scheduled_for": _utc(run.scheduled_for),
        "due_at": _utc(run.due),
        "trigger": run.trigger.value,
        "status": run.status.value,
        "skip_reason": None if run.skip_reason is None else run.skip_reason.value,
        "attempt_count": run.attempt_count,
        # While in_progress the column holds the claim time (domain/run.py): nothing is next.
        "next_attempt_at": None
        if run.status is RunStatus.IN_PROGRESS
        else _utc(run.next_attempt_at),
        "started_at": _utc(run.started_at),
        "finished_at": _utc(run.finished_at),
        "replay_of": run.replay_of,
        "schedule_version": run.schedule_version,
        "completion_deadline": _utc(run.completion_deadline),
        "completed_at": _utc(run.completed_at),
        "completion_detail": run.completion_detail,
        "completion_output": run.completion_output,
        "too_fast": run.too_fast,
    }


def run_list_out(page: svc.RunPage) -> dict[str, Any]:
    items = []
    for run in page.items:
        last = page.last_attempts.get(run.id)
        items.append(
            {
                **run_out(run),
                "last_status_code": None if last is None else last.status_code,
                "last_error": None if last is None else attempt_out(last)["error"],
            }
        )
    return {"items": items, "next_cursor": page.next_cursor}


def attempt_out(a: Attempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "started_at": _utc(a.started_at),
        "duration_ms": a.duration_ms,
        "status_code": a.status_code,
        "error": None
        if a.error_kind is None
        else {"kind": a.error_kind, "message": a.error_message},
        "response_excerpt": a.response_excerpt,
        "completed_at": _utc(a.completed_at),
        "completion_detail": a.completion_detail,
        "completion_output": a.completion_output,
    }


@router.post(
    "/{schedule_id}/trigger", operation_id="triggerSchedule", status_code=202, response_model=RunOut
)
async def trigger(
    request: Request,
    schedule_id: IdPath,
    principal: Principal = require_writer(WRITE),
) -> dict[str, Any]:
    ctx = runs_context_of(request)
    run = await svc.trigger_run(
        ctx.uows,
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        clock=ctx.clock,
        wake=ctx.wake,
    )
    return run_out(run)


def _aware(from_: datetime | None, to: datetime | None) -> None:
    for name, value in (("from", from_), ("to", to)):
        if value is not None and value.tzinfo is None:
            raise InvalidInput(name, "must carry a UTC offset (RFC 3339)")


# Declared before `/{schedule_id}/runs`, which would otherwise take `-` for a schedule id.
@router.get(
    "/-/runs",
    operation_id="listTenantRuns",
    response_model=RunList,
    responses=problem_responses(400),
)
async def list_tenant_runs(
    request: Request,
    principal: Principal = require(READ),
    status: RunStatus | None = None,
    schedule_id: Annotated[str, Query(min_length=1, max_length=64), NO_CONTROL_CHARS] | None = None,
    trigger: Trigger | None = None,
    from_: Annotated[Rfc3339 | None, Query(alias="from")] = None,
    to: Instant = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str, Query(max_length=512), NO_CONTROL_CHARS] | None = None,
) -> dict[str, Any]:
    _aware(from_, to)
    page = await svc.list_tenant_runs(
        runs_context_of(request).uows,
        tenant_id=principal.tenant_id,
        limit=limit,
        cursor=cursor,
        filters=RunPageFilter(
            status=status,
            scheduled_from=from_,
            scheduled_to=to,
            trigger=trigger,
            schedule_id=schedule_id,
        ),
    )
    return run_list_out(page)


@router.get(
    "/{schedule_id}/runs",
    operation_id="listRuns",
    response_model=RunList,
    responses=problem_responses(400),
)
async def list_runs(
    request: Request,
    schedule_id: IdPath,
    principal: Principal = require(READ),
    status: RunStatus | None = None,
    trigger: Trigger | None = None,
    from_: Annotated[Rfc3339 | None, Query(alias="from")] = None,
    to: Instant = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str, Query(max_length=512), NO_CONTROL_CHARS] | None = None,
) -> dict[str, Any]:
    _aware(from_, to)
    page = await svc.list_runs(
        runs_context_of(request).uows,
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        limit=limit,
        cursor=cursor,
        filters=RunPageFilter(
            status=status, scheduled_from=from_, scheduled_to=to, trigger=trigger
        ),
    )
    return run_list_out(page)


class StatsBucketOut(BaseModel):
    start: UtcTimestamp
    counts: dict[str, int] = Field(description="runs per status; absent statuses are 0")


class RunStatsOut(BaseModel):
    window: Literal["day", "week", "month"]
    bucket: Literal["hour", "day"] = Field(
        description="hours (day) or days (week, month) of `timezone`; a DST day is 23 or 25 hours"
    )
    timezone: str = Field(description="the zone the buckets are cut in (the `tz` asked, or UTC)")
    from_: UtcTimestamp = Field(serialization_alias="from")
    to: UtcTimestamp
    buckets: list[StatsBucketOut]
    totals: dict[str, int]
    last_run: RunOut | None = Field(
        description="the schedule's newest run, in or out of the window"
    )


# Declared before `/{schedule_id}/runs/{run_id}`, which would otherwise take `stats` for a run id.
@router.get(
    "/{schedule_id}/runs/stats",
    operation_id="getRunStats",
    response_model=RunStatsOut,
    response_model_by_alias=True,
    summary="Runs per status per hour or day of a zone over a window (the console's timeline)",
)
async def run_stats(
    request: Request,
    schedule_id: IdPath,
    principal: Principal = require(READ),
    window: Literal["day", "week", "month"] = "day",
    tz: Annotated[
        str,
        Query(
            min_length=1,
            max_length=64,
            description="IANA zone the buckets are cut in (the schedule's, for its own page)",
        ),
        NO_CONTROL_CHARS,
    ] = "UTC",
) -> dict[str, Any]:
    ctx = runs_context_of(request)
    stats = await stats_svc.run_stats(
        ctx.uows,
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        window=window,
        clock=ctx.clock,
        timezone=tz,
    )
    return {
        "window": stats.window,
        "bucket": stats.bucket,
        "timezone": stats.timezone,
        "from_": stats.start,
        "to": stats.end,
        "buckets": [{"start": b.start, "counts": b.counts} for b in stats.buckets],
        "totals": stats.totals,
        "last_run": None if stats.last_run is None else run_out(stats.last_run),
    }


@router.get("/{schedule_id}/runs/{run_id}", operation_id="getRun", response_model=RunWithAttempts)
async def get_run(
    request: Request,
    schedule_id: IdPath,
    run_id: RunIdPath,
    principal: Principal = require(READ),
) -> dict[str, Any]:
    detail = await svc.get_run(
        runs_context_of(request).uows,
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        run_id=run_id,
    )
    return {**run_out(detail.run), "attempts": [attempt_out(a) for a in detail.attempts]}


@router.post(
    "/{schedule_id}/runs/{run_id}/replay",
    operation_id="replayRun",
    status_code=202,
    response_model=RunOut,
)
async def replay(
    request: Request,
    schedule_id: IdPath,
    run_id: RunIdPath,
    principal: Principal = require_writer(WRITE),
) -> dict[str, Any]:
    ctx = runs_context_of(request)
    run = await svc.replay_run(
        ctx.uows,
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        run_id=run_id,
        clock=ctx.clock,
        wake=ctx.wake,
    )
    return run_out(run)
