"""/v1/schedules/ routes: create, list, get, patch, delete, pause, resume, rotate, occurrences,
the stateless preview of timing fields (DESIGN.md §7a), and PUT by key (§7b).

Every route is scoped to the caller's tenant: another tenant's id answers 404 exactly like a
missing one. The signing secret appears only in the create and rotate responses, and in the
PATCH response that makes an event schedule a webhook; an event schedule has none (`secret: null`,
rotate is 409 `…/not-a-webhook`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response

from authclient import Principal
from authclient.fastapi import require
from scheduler.domain.definition import (
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    SCHEDULE_KEY_PATTERN,
    ScheduleDefinition,
)
from scheduler.domain.occurrences import format_occurrence
from scheduler.domain.policies import Action, ScheduleState
from scheduler.domain.schedule import Schedule
from scheduler.domain.timing import AnnotatedOccurrence
from scheduler.entrypoints.api.context import ApiContext, context_of, require_writer
from scheduler.entrypoints.api.schemas import (
    OccurrenceOut,
    OccurrencesOut,
    PauseIn,
    PreviewIn,
    ScheduleCreate,
    ScheduleList,
    ScheduleOut,
    SchedulePatch,
    ScheduleWithSecret,
    TargetIn,
    changes_of,
    definition_of,
    definition_out,
    problem_responses,
    timing_of,
)
from scheduler.service_layer import schedules as svc
from scheduler.service_layer.errors import InvalidInput, VersionMismatch
from scheduler.service_layer.run_ports import RunSummary
from scheduler.service_layer.unit_of_work import ListFilter
from servicekit.text import NO_CONTROL_CHARS
from webhookdeliver import InvalidTargetURL, validate_target_url

READ = "schedules:read"
WRITE = "schedules:write"
MAX_IDEMPOTENCY_KEY_CHARS = 255
# `?label=` filters of one list request: each one is an index condition; more than 32 (the
# labels a schedule can carry) could never all hold with distinct keys anyway.
MAX_LABEL_FILTERS = 32

router = APIRouter(
    prefix="/v1/schedules",
    tags=["schedules"],
    responses=problem_responses(401, 403, 404, 422, 503),
)
# Statuses of the routes that take a JSON body: malformed JSON, too large, not JSON.
BODY_ERRORS = (400, 413, 415)

IdPath = Annotated[
    str, Path(min_length=1, max_length=64, description="schedule id"), NO_CONTROL_CHARS
]
IfMatch = Annotated[str | None, Header(alias="If-Match", max_length=100)]


def to_out(s: Schedule, runs: RunSummary | None = None) -> dict[str, Any]:
    runs = runs or RunSummary()
    return {
        "id": s.id,
        **definition_out(s.definition),
        "key": s.key,
        "state": s.state,
        "paused_reason": s.paused_reason,
        "next_run_at": _utc(s.next_run_at),
        "created_at": _utc(s.created_at),
        "updated_at": _utc(s.updated_at),
        "version": s.version,
        "last_run": _last_run(runs),
        "next_occurrence_at": _next_occurrence(s, runs),
        "consecutive_failures": s.consecutive_failures,
    }


def _last_run(runs: RunSummary) -> dict[str, Any] | None:
    run, attempt = runs.last_finished, runs.last_attempt
    if run is None:
        return None
    error = None
    if attempt is not None and attempt.error_kind is not None:
        error = {"kind": attempt.error_kind, "message": attempt.error_message}
    return {
        "id": run.id,
        "scheduled_for": _utc(run.scheduled_for),
        "trigger": run.trigger,
        "status": run.status,
        "finished_at": _utc(run.finished_at),
        "attempt_count": run.attempt_count,
        "status_code": None if attempt is None else attempt.status_code,
        "error": error,
        "response_excerpt": None if attempt is None else attempt.response_excerpt,
    }


def _next_occurrence(s: Schedule, runs: RunSummary) -> datetime | None:
    """Runs planned ahead come before next_run_at (the next occurrence not yet planned). A
    paused schedule runs nothing: its planned runs are skipped when they come due."""
    if s.state is ScheduleState.PAUSED:
        return None
    candidates = [t for t in (runs.next_planned_at, s.next_run_at) if t is not None]
    return _utc(min(candidates)) if candidates else None


def _utc(dt: datetime | None) -> datetime | None:
    return None if dt is None else dt.astimezone(UTC)


def _out(s: Schedule, runs: RunSummary | None = None) -> ScheduleOut:
    return ScheduleOut.model_validate(to_out(s, runs))


async def _out_read(ctx: ApiContext, s: Schedule) -> ScheduleOut:
    """A write's answer with the schedule's runs as they stand after it."""
    runs = await svc.run_summary(ctx.uow_factory(), tenant_id=s.tenant_id, schedule_id=s.id)
    return _out(s, runs)


def etag(s: Schedule) -> str:
    return f'"{s.version}"'


def parse_if_match(value: str | None) -> int | None:
    """`"3"` or `W/"3"` -> 3; absent or `*` -> None (no precondition). Anything else can never
    match a current version, so it is a 412 (RFC 9110 §13.1.1)."""
    if value is None or value.strip() == "*":
        return None
    tag = value.strip().removeprefix("W/").strip('"')
    if not tag.isdigit() or len(tag) > 18:
        raise VersionMismatch()
    return int(tag)


def _check_target(ctx: ApiContext, t: TargetIn | None) -> None:
    if t is None:
        return
    try:
        validate_target_url(
            t.url,
            allow_private_networks=ctx.allow_private_networks,
            allowed_ports=ctx.allowed_ports,
        )
    except InvalidTargetURL as exc:
        raise InvalidInput("target.url", exc.reason) from None


def _definition(ctx: ApiContext, body: ScheduleCreate) -> ScheduleDefinition:
    _check_target(ctx, body.target)
    return definition_of(body)


def _changes(ctx: ApiContext, body: SchedulePatch) -> dict[str, Any]:
    changes = changes_of(body)
    if "target" in changes:
        _check_target(ctx, body.target)
    return changes


def _with_etag(response: Response, s: Schedule) -> None:
    response.headers["ETag"] = etag(s)


@router.post(
    "/",
    operation_id="createSchedule",
    status_code=201,
    response_model=ScheduleWithSecret,
    responses={
        200: {
            "model": ScheduleWithSecret,
            "description": "Idempotent replay: the schedule the first request with this "
            "Idempotency-Key created (header `Idempotent-Replayed: true`)",
        },
        **problem_responses(*BODY_ERRORS, 409),
    },
    summary="Create a schedule (honours Idempotency-Key)",
)
async def create_schedule(
    request: Request,
    response: Response,
    body: ScheduleCreate,
    principal: Principal = require_writer(WRITE),
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", min_length=1, max_length=MAX_IDEMPOTENCY_KEY_CHARS),
    ] = None,
) -> ScheduleWithSecret:
    ctx = context_of(request)
    created = await svc.create_schedule(
        ctx.uows_as(principal)(),
        _definition(ctx, body),
        tenant_id=principal.tenant_id,
        clock=ctx.clock,
        new_secret=ctx.new_secret,
        limits=ctx.limits_for(principal.tenant_id),
        idempotency_key=idempotency_key,
        body_hash=svc.request_hash(body.model_dump(mode="json")),
        key=body.key,
        secret=body.secret,
    )
    if created.replayed:
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = f"/v1/schedules/{created.schedule.id}"
    _with_etag(response, created.schedule)
    # A replay answers for a schedule that may have run since.
    out = await _out_read(ctx, created.schedule) if created.replayed else _out(created.schedule)
    return ScheduleWithSecret(**out.model_dump(), secret=created.secret)


@router.get(
    "/",
    operation_id="listSchedules",
    response_model=ScheduleList,
    responses=problem_responses(400),
    summary="List schedules (cursor pagination)",
)
async def list_schedules(
    request: Request,
    principal: Principal = require(READ),
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str, Query(max_length=512), NO_CONTROL_CHARS] | None = None,
    state: ScheduleState | None = None,
    action: Action | None = None,
    label: Annotated[
        list[str] | None,
        Query(
            max_length=MAX_LABEL_FILTERS,
            description="`k=v`: the label k equals v; `k`: the schedule has a label k. "
            "Repeatable: every one must hold",
        ),
    ] = None,
    key: Annotated[
        str | None,
        Query(pattern=SCHEDULE_KEY_PATTERN, max_length=128, description="the schedule's key"),
    ] = None,
) -> ScheduleList:
    ctx = context_of(request)
    page = await svc.list_schedules(
        ctx.uow_factory(),
        tenant_id=principal.tenant_id,
        limit=limit,
        cursor=cursor,
        filters=ListFilter(state=state, action=action, labels=_label_filters(label or []), key=key),
    )
    return ScheduleList(
        items=[_out(s, page.runs.get(s.id)) for s in page.items], next_cursor=page.next_cursor
    )


def _label_filters(raw: list[str]) -> tuple[tuple[str, str | None], ...]:
    out: list[tuple[str, str | None]] = []
    for item in raw:
        name, eq, value = item.partition("=")
        if not re.match(LABEL_KEY_PATTERN, name):
            raise InvalidInput("label", f"{item[:100]!r}: the key must match {LABEL_KEY_PATTERN}")
        if eq and not re.match(LABEL_VALUE_PATTERN, value):
            raise InvalidInput(
                "label", f"{item[:100]!r}: the value must match {LABEL_VALUE_PATTERN}"
            )
        out.append((name, value if eq else None))
    return tuple(out)


@router.put(
    "/by-key/{key:path}",
    operation_id="putScheduleByKey",
    response_model=ScheduleWithSecret,
    responses={
        201: {
            "model": ScheduleWithSecret,
            "description": "Created (Location names it); a generated secret is shown once",
        },
        **problem_responses(*BODY_ERRORS, 409),
    },
    summary="Create or replace the schedule with this key (a whole definition); an unchanged "
    "definition writes nothing",
)
async def put_schedule_by_key(
    request: Request,
    response: Response,
    key: Annotated[
        str,
        Path(pattern=SCHEDULE_KEY_PATTERN, max_length=128, description="the schedule's key"),
    ],
    body: ScheduleCreate,
    principal: Principal = require_writer(WRITE),
) -> ScheduleWithSecret:
    ctx = context_of(request)
    if body.key is not None and body.key != key:
        raise InvalidInput("key", "must be absent or equal to the key in the path")
    put = await svc.put_schedule_by_key(
        ctx.uows_as(principal),
        _definition(ctx, body),
        tenant_id=principal.tenant_id,
        key=key,
        secret=body.secret,
        clock=ctx.clock,
        new_secret=ctx.new_secret,
        limits=ctx.limits_for(principal.tenant_id),
    )
    if put.created:
        response.status_code = 201
        response.headers["Location"] = f"/v1/schedules/{put.schedule.id}"
    _with_etag(response, put.schedule)
    out = _out(put.schedule) if put.created else await _out_read(ctx, put.schedule)
    return ScheduleWithSecret(**out.model_dump(), secret=put.secret)


@router.get("/{schedule_id}", operation_id="getSchedule", response_model=ScheduleOut)
async def get_schedule(
    request: Request, response: Response, schedule_id: IdPath, principal: Principal = require(READ)
) -> ScheduleOut:
    ctx = context_of(request)
    s, runs = await svc.get_schedule_with_runs(
        ctx.uow_factory(), tenant_id=principal.tenant_id, schedule_id=schedule_id
    )
    _with_etag(response, s)
    return _out(s, runs)


@router.patch(
    "/{schedule_id}",
    operation_id="updateSchedule",
    response_model=ScheduleWithSecret,
    responses=problem_responses(*BODY_ERRORS, 409, 412),
    summary="Partial update; send If-Match with the ETag for a safe concurrent edit",
)
async def patch_schedule(
    request: Request,
    response: Response,
    schedule_id: IdPath,
    body: SchedulePatch,
    principal: Principal = require_writer(WRITE),
    if_match: IfMatch = None,
) -> ScheduleWithSecret:
    ctx = context_of(request)
    expected = parse_if_match(if_match)
    updated = await svc.update_schedule(
        ctx.uows_as(principal)(),
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        changes=_changes(ctx, body),
        expected_version=expected,
        clock=ctx.clock,
        limits=ctx.limits_for(principal.tenant_id),
        new_secret=ctx.new_secret,
    )
    _with_etag(response, updated.schedule)
    out = await _out_read(ctx, updated.schedule)
    return ScheduleWithSecret(**out.model_dump(), secret=updated.secret)


@router.delete(
    "/{schedule_id}",
    status_code=204,
    response_class=Response,
    responses=problem_responses(412),
    operation_id="deleteSchedule",
)
async def delete_schedule(
    request: Request,
    schedule_id: IdPath,
    principal: Principal = require_writer(WRITE),
    if_match: IfMatch = None,
) -> Response:
    ctx = context_of(request)
    await svc.delete_schedule(
        ctx.uows_as(principal)(),
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        expected_version=parse_if_match(if_match),
        clock=ctx.clock,
    )
    return Response(status_code=204)


@router.post(
    "/{schedule_id}/pause",
    operation_id="pauseSchedule",
    response_model=ScheduleOut,
    responses=problem_responses(*BODY_ERRORS, 412),
)
async def pause_schedule(
    request: Request,
    response: Response,
    schedule_id: IdPath,
    principal: Principal = require_writer(WRITE),
    body: Annotated[PauseIn | None, Body()] = None,
    if_match: IfMatch = None,
) -> ScheduleOut:
    ctx = context_of(request)
    s = await svc.pause_schedule(
        ctx.uows_as(principal)(),
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        reason=body.reason if body else None,
        expected_version=parse_if_match(if_match),
        clock=ctx.clock,
    )
    _with_etag(response, s)
    return await _out_read(ctx, s)


@router.post(
    "/{schedule_id}/resume",
    operation_id="resumeSchedule",
    response_model=ScheduleOut,
    responses=problem_responses(412),
)
async def resume_schedule(
    request: Request,
    response: Response,
    schedule_id: IdPath,
    principal: Principal = require_writer(WRITE),
    if_match: IfMatch = None,
) -> ScheduleOut:
    ctx = context_of(request)
    s = await svc.resume_schedule(
        ctx.uows_as(principal)(),
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        expected_version=parse_if_match(if_match),
        clock=ctx.clock,
        limits=ctx.limits_for(principal.tenant_id),
    )
    _with_etag(response, s)
    return await _out_read(ctx, s)


@router.post(
    "/{schedule_id}/secret/rotate",
    operation_id="rotateScheduleSecret",
    response_model=ScheduleWithSecret,
    responses=problem_responses(409),
    summary="New signing secret (webhook schedules; an event schedule is 409 not-a-webhook)",
)
async def rotate_secret(
    request: Request,
    response: Response,
    schedule_id: IdPath,
    principal: Principal = require_writer(WRITE),
) -> ScheduleWithSecret:
    ctx = context_of(request)
    s, secret = await svc.rotate_secret(
        ctx.uows_as(principal)(),
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        clock=ctx.clock,
        new_secret=ctx.new_secret,
        grace=ctx.rotation_grace,
    )
    _with_etag(response, s)
    return ScheduleWithSecret(**(await _out_read(ctx, s)).model_dump(), secret=secret)


@router.get(
    "/{schedule_id}/occurrences", operation_id="listOccurrences", response_model=OccurrencesOut
)
async def occurrences(
    request: Request,
    schedule_id: IdPath,
    principal: Principal = require(READ),
    count: Annotated[int, Query(ge=1, le=svc.MAX_OCCURRENCES_PREVIEW)] = 10,
) -> OccurrencesOut:
    ctx = context_of(request)
    s, items = await svc.preview_occurrences(
        ctx.uow_factory(),
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        count=count,
        clock=ctx.clock,
    )
    zone = s.definition.timing.timezone
    return OccurrencesOut(timezone=zone, items=[_occurrence_out(i) for i in items])


@router.post(
    "/preview",
    operation_id="previewSchedule",
    response_model=OccurrencesOut,
    responses=problem_responses(*BODY_ERRORS),
    summary="Annotated occurrences of timing fields, validated as create validates them; "
    "stores nothing",
)
async def preview(
    request: Request, body: PreviewIn, principal: Principal = require(READ)
) -> OccurrencesOut:
    ctx = context_of(request)
    items = await svc.off_loop(
        svc.preview_timing,
        timing_of(body),
        after=body.after,
        count=body.count,
        clock=ctx.clock,
        limits=ctx.limits_for(principal.tenant_id),
    )
    return OccurrencesOut(timezone=body.timezone, items=[_occurrence_out(i) for i in items])


def _occurrence_out(o: AnnotatedOccurrence) -> OccurrenceOut:
    return OccurrenceOut(at=format_occurrence(o.at), utc=o.at, dst=o.dst, due_at=o.due_at)
