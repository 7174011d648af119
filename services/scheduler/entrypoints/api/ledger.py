"""`GET /v1/schedules/{id}/ledger?from=&to=` (DESIGN.md §7b): every occurrence the versions in
force put in [from, to) (at most 31 days) with its outcome (service_layer/ledger.py,
domain/ledger.py), in cursor pages of up to 1,000 items.

Without `from` and `to`, the window is the 24 hours before now.
Items are `{"scheduled_for", "version", "outcome", "run_id"?, "reason"?}`: `run_id` when a run
decides the outcome, `reason` for `skipped` (the run's skip_reason) and `not_planned`. The first
page also carries `summary` (the whole window's counts) and `other_runs` (manual, replay and
backfill runs of the window, at most 100, `other_runs_truncated` when there are more); later
pages carry `summary: null` and no other runs. Tenant-scoped; a deleted schedule's ledger stays
readable while its versions are kept.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from authclient import Principal
from authclient.fastapi import require
from scheduler.domain.ledger import NotPlanned, Outcome, Summary
from scheduler.entrypoints.api.context import context_of
from scheduler.entrypoints.api.schedules import READ, IdPath
from scheduler.entrypoints.api.schemas import problem_responses
from scheduler.service_layer import ledger as svc
from servicekit.rfc3339 import Rfc3339, UtcTimestamp
from servicekit.text import NO_CONTROL_CHARS

router = APIRouter(
    prefix="/v1/schedules",
    tags=["schedules"],
    responses=problem_responses(400, 401, 403, 404, 422, 503),
)

DEFAULT_WINDOW = timedelta(hours=24)
OUTCOMES = ", ".join(f"`{o.value}`" for o in Outcome)
REASONS = ", ".join(f"`{r.value}`" for r in NotPlanned)


class LedgerItemOut(BaseModel):
    scheduled_for: UtcTimestamp = Field(description="the occurrence (jitter never moves it)")
    version: int | None = Field(
        description="the schedule version in force at scheduled_for (null: a run older than "
        "versions)"
    )
    outcome: Outcome = Field(description=f"one of {OUTCOMES}")
    run_id: str | None = Field(default=None, description="the run that decides the outcome")
    reason: str | None = Field(
        default=None,
        description=f"`skipped`: the run's skip_reason; `not_planned`: one of {REASONS}",
    )


class LedgerReasonsOut(BaseModel):
    skipped: dict[str, int] = Field(description="skipped items by skip_reason")
    not_planned: dict[str, int] = Field(description="not_planned items by reason")


class LedgerSummaryOut(BaseModel):
    total: int = Field(description="items in the whole window")
    outcomes: dict[str, int] = Field(description="items by outcome, every outcome present")
    reasons: LedgerReasonsOut


class OtherRunOut(BaseModel):
    id: str
    trigger: str = Field(description="`manual`, `replay` or `backfill`")
    scheduled_for: UtcTimestamp
    status: str
    skip_reason: str | None
    schedule_version: int | None


class LedgerOut(BaseModel):
    schedule_id: str
    from_: UtcTimestamp = Field(serialization_alias="from")
    to: UtcTimestamp
    items: list[LedgerItemOut]
    next_cursor: str | None
    summary: LedgerSummaryOut | None = Field(
        description="counts over the whole window; on the first page only (null on later pages)"
    )
    other_runs: list[OtherRunOut] = Field(
        description="runs that are not occurrences (manual, replay, backfill) in the window, "
        "oldest first; on the first page only"
    )
    other_runs_truncated: bool = Field(description="more other runs than the 100 listed")


def _summary_out(s: Summary) -> LedgerSummaryOut:
    return LedgerSummaryOut(
        total=s.total,
        outcomes={o.value: s.outcomes.get(o.value, 0) for o in Outcome},
        reasons=LedgerReasonsOut(skipped=dict(s.skipped), not_planned=dict(s.not_planned)),
    )


def _item_out(scheduled_for: Any, version: int | None, outcome: Outcome, **extra: Any) -> Any:
    fields = {k: v for k, v in extra.items() if v is not None}  # absent, not null
    return LedgerItemOut(scheduled_for=scheduled_for, version=version, outcome=outcome, **fields)


@router.get(
    "/{schedule_id}/ledger",
    operation_id="getScheduleLedger",
    response_model=LedgerOut,
    response_model_by_alias=True,
    response_model_exclude_unset=True,
    summary="Every occurrence of a window (at most 31 days) and what became of it",
)
async def get_ledger(
    request: Request,
    schedule_id: IdPath,
    from_: Annotated[
        Rfc3339 | None,
        Query(alias="from", description="window start (inclusive); default `to` minus 24 h"),
    ] = None,
    to: Annotated[
        Rfc3339 | None,
        Query(description="window end (exclusive), at most 31 days after `from`; default now"),
    ] = None,
    principal: Principal = require(READ),
    limit: Annotated[int, Query(ge=1, le=svc.LIMIT_MAX)] = svc.LIMIT_DEFAULT,
    cursor: Annotated[str, Query(max_length=512), NO_CONTROL_CHARS] | None = None,
) -> LedgerOut:
    ctx = context_of(request)
    end = to if to is not None else ctx.clock()
    page = await svc.read_ledger(
        ctx.uow_factory(),
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        start=from_ if from_ is not None else end - DEFAULT_WINDOW,
        end=end,
        limit=limit,
        cursor=cursor,
        clock=ctx.clock,
    )
    return LedgerOut(
        schedule_id=schedule_id,
        from_=page.start,
        to=page.end,
        items=[
            _item_out(i.scheduled_for, i.version, i.outcome, run_id=i.run_id, reason=i.reason)
            for i in page.items
        ],
        next_cursor=page.next_cursor,
        summary=None if page.summary is None else _summary_out(page.summary),
        other_runs=[
            OtherRunOut(
                id=r.id,
                trigger=r.trigger,
                scheduled_for=r.scheduled_for,
                status=r.status,
                skip_reason=r.skip_reason,
                schedule_version=r.schedule_version,
            )
            for r in page.other_runs
        ],
        other_runs_truncated=page.other_runs_truncated,
    )
