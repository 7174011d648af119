"""`POST /v1/schedules/{id}/backfill` (DESIGN.md §5, service_layer/backfill.py): runs for the
schedule's occurrences in (from, to]. A dry run answers 200 with the annotated occurrences and
whether each already has a run; otherwise 202 with the counts created and already existing.
Mounted with the runs routes (`runs.install_runs`), whose context (clock, wake-up) it shares.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from authclient import Principal
from scheduler.domain.occurrences import format_occurrence
from scheduler.domain.policies import DstAnnotation
from scheduler.entrypoints.api.context import require_writer, runs_context_of
from scheduler.entrypoints.api.schemas import problem_responses
from scheduler.service_layer import backfill as svc
from servicekit.rfc3339 import Rfc3339, UtcTimestamp
from servicekit.text import NO_CONTROL_CHARS

WRITE = "schedules:write"

router = APIRouter(
    prefix="/v1/schedules", tags=["runs"], responses=problem_responses(401, 403, 404, 422, 503)
)
IdPath = Annotated[
    str, Path(min_length=1, max_length=64, description="schedule id"), NO_CONTROL_CHARS
]


class BackfillIn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: Rfc3339 = Field(alias="from", description="occurrences strictly after this instant")
    to: Rfc3339 = Field(description="occurrences up to and including this instant (not future)")
    dry_run: bool = Field(default=False, description="list the occurrences; create nothing")
    include_existing: bool = Field(
        default=False,
        description="also run occurrences that already have a run (a new backfill each time)",
    )


class BackfillOccurrenceOut(BaseModel):
    at: str = Field(description="local wall time with the zone's UTC offset")
    utc: UtcTimestamp
    dst: DstAnnotation | None = Field(description="how DST touched it (DESIGN.md §7a)")
    exists: bool = Field(description="a run (any trigger) already exists for this occurrence")


class BackfillPreviewOut(BaseModel):
    timezone: str
    items: list[BackfillOccurrenceOut]


class BackfillOut(BaseModel):
    created: int = Field(description="new runs, trigger backfill")
    existing: int = Field(description="occurrences left alone: they already had a run")


@router.post(
    "/{schedule_id}/backfill",
    operation_id="backfillSchedule",
    status_code=202,
    response_model=BackfillOut | BackfillPreviewOut,
    responses={
        200: {"model": BackfillPreviewOut, "description": "dry run: the occurrences"},
        202: {"model": BackfillOut, "description": "runs created"},
        **problem_responses(400, 413, 415),
    },
    summary="Runs (trigger backfill) for the occurrences in (from, to]; at most "
    f"{svc.MAX_BACKFILL_OCCURRENCES}",
)
async def backfill(
    request: Request,
    response: Response,
    schedule_id: IdPath,
    body: BackfillIn,
    principal: Principal = require_writer(WRITE),
) -> BackfillOut | BackfillPreviewOut:
    ctx = runs_context_of(request)
    result = await svc.backfill(
        ctx.uows,
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        after=body.from_,
        until=body.to,
        dry_run=body.dry_run,
        include_existing=body.include_existing,
        clock=ctx.clock,
        wake=ctx.wake,
        defaults=ctx.default_limits,
    )
    if body.dry_run:
        response.status_code = 200
        return BackfillPreviewOut(
            timezone=result.timezone,
            items=[
                BackfillOccurrenceOut(
                    at=format_occurrence(i.occurrence.at),
                    utc=i.occurrence.at,
                    dst=i.occurrence.dst,
                    exists=i.exists,
                )
                for i in result.items
            ],
        )
    return BackfillOut(created=result.created, existing=result.existing)
