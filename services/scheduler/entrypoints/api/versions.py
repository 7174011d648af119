"""/v1/schedules/{id}/versions routes (DESIGN.md §7b): a schedule's versions newest first, one
version's definition, and restoring one as a new version (service_layer/versions.py).

Tenant-scoped like every schedule route: another tenant's schedule has no versions (404). A
deleted schedule's versions stay readable until retention purges them; restoring one is 404.
No secret is ever shown: a new one appears in `changes` as `{"field": "secret"}` alone.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, Field, JsonValue

from authclient import Principal
from authclient.fastapi import require
from scheduler.domain.definition import ScheduleDefinition
from scheduler.entrypoints.api.context import ApiContext, context_of, require_writer
from scheduler.entrypoints.api.schedules import (
    READ,
    WRITE,
    IdPath,
    IfMatch,
    etag,
    parse_if_match,
    to_out,
)
from scheduler.entrypoints.api.schemas import (
    DefinitionOut,
    ScheduleWithSecret,
    definition_out,
    problem_responses,
)
from scheduler.service_layer import versions as svc
from scheduler.service_layer.errors import InvalidInput
from scheduler.service_layer.schedules import run_summary
from scheduler.service_layer.version_ports import StoredVersion
from servicekit.rfc3339 import UtcTimestamp
from servicekit.text import NO_CONTROL_CHARS
from webhookdeliver import InvalidTargetURL, validate_target_url

router = APIRouter(
    prefix="/v1/schedules",
    tags=["schedules"],
    responses=problem_responses(401, 403, 404, 422, 503),
)

VersionPath = Annotated[int, Path(ge=1, le=2_147_483_647, description="a version number")]
CHANGES = (
    "the fields this version changed, by their flat names (a definition field, `state`, "
    '`paused_reason`): `{"field", "from", "to"}`; a new signing secret is `{"field": '
    '"secret"}` alone, never a value; empty for version 1 (the creation)'
)


class VersionItem(BaseModel):
    version: int
    at: UtcTimestamp
    actor: str = Field(description="the token's subject, or `system`")
    source: str = Field(
        description="what made the change: `api`, `apply`, `breaker`, `quota`, `suspension` "
        "or `planner`"
    )
    changes: list[dict[str, JsonValue]] = Field(description=CHANGES)


class VersionList(BaseModel):
    items: list[VersionItem]
    next_cursor: str | None


class VersionOut(VersionItem):
    schedule_id: str
    state: str = Field(description="`active`, `paused`, `completed`, or `deleted`")
    paused_reason: str | None
    definition: DefinitionOut = Field(description="the definition as of this version")


def _item(v: StoredVersion) -> dict[str, Any]:
    return {
        "version": v.version,
        "at": v.at,
        "actor": v.actor.subject,
        "source": v.actor.source.value,
        "changes": list(v.changes),
    }


@router.get(
    "/{schedule_id}/versions",
    operation_id="listScheduleVersions",
    response_model=VersionList,
    responses=problem_responses(400),
    summary="A schedule's versions, newest first (cursor pagination)",
)
async def list_versions(
    request: Request,
    schedule_id: IdPath,
    principal: Principal = require(READ),
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str, Query(max_length=512), NO_CONTROL_CHARS] | None = None,
) -> VersionList:
    ctx = context_of(request)
    page = await svc.list_versions(
        ctx.uow_factory(),
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        limit=limit,
        cursor=cursor,
    )
    items = [VersionItem(**_item(v)) for v in page.items]
    return VersionList(items=items, next_cursor=page.next_cursor)


@router.get(
    "/{schedule_id}/versions/{version}",
    operation_id="getScheduleVersion",
    response_model=VersionOut,
    summary="One version: the definition and state as of it, who made it and what changed",
)
async def get_version(
    request: Request,
    schedule_id: IdPath,
    version: VersionPath,
    principal: Principal = require(READ),
) -> VersionOut:
    ctx = context_of(request)
    v = await svc.get_version(
        ctx.uow_factory(), tenant_id=principal.tenant_id, schedule_id=schedule_id, version=version
    )
    assert v.definition is not None  # get() reads it
    return VersionOut(
        **_item(v),
        schedule_id=v.schedule_id,
        state=v.state,
        paused_reason=v.paused_reason,
        definition=DefinitionOut(**definition_out(v.definition)),
    )


@router.post(
    "/{schedule_id}/versions/{version}/restore",
    operation_id="restoreScheduleVersion",
    response_model=ScheduleWithSecret,
    responses=problem_responses(409, 412),
    summary="Apply a version's definition as a new version (the update path: validated, a "
    "timing change re-plans; If-Match optional)",
)
async def restore_version(
    request: Request,
    response: Response,
    schedule_id: IdPath,
    version: VersionPath,
    principal: Principal = require_writer(WRITE),
    if_match: IfMatch = None,
) -> ScheduleWithSecret:
    ctx = context_of(request)
    updated = await svc.restore_version(
        ctx.uows_as(principal),
        tenant_id=principal.tenant_id,
        schedule_id=schedule_id,
        version=version,
        expected_version=parse_if_match(if_match),
        clock=ctx.clock,
        limits=ctx.limits_for(principal.tenant_id),
        new_secret=ctx.new_secret,
        check=lambda d: _check_target(ctx, d),
    )
    s = updated.schedule
    response.headers["ETag"] = etag(s)
    runs = await run_summary(ctx.uow_factory(), tenant_id=s.tenant_id, schedule_id=s.id)
    return ScheduleWithSecret(**to_out(s, runs), secret=updated.secret)


def _check_target(ctx: ApiContext, d: ScheduleDefinition) -> None:
    """The target URL rules of today (a version may predate a stricter setting)."""
    if d.target is None:
        return
    try:
        validate_target_url(
            d.target.url,
            allow_private_networks=ctx.allow_private_networks,
            allowed_ports=ctx.allowed_ports,
        )
    except InvalidTargetURL as exc:
        raise InvalidInput("target.url", exc.reason) from None
