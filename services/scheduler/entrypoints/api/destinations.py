"""/v1/destinations routes (DESIGN.md §7b "Flow control"): a tenant's limits per destination
(`host:port` of a target URL) and what the destination told us (held until, current rate) with
what is in flight there now, every worker's. Tenant-scoped (service_layer/destinations.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, Field

from authclient import Principal
from authclient.fastapi import require
from scheduler.entrypoints.api.context import context_of, require_writer
from scheduler.entrypoints.api.schedules import READ, WRITE
from scheduler.entrypoints.api.schemas import problem_responses
from scheduler.service_layer import destinations as svc
from servicekit.flow import MAX_DESTINATION_CHARS
from servicekit.rfc3339 import UtcTimestamp
from servicekit.text import NO_CONTROL_CHARS

router = APIRouter(
    prefix="/v1/destinations",
    tags=["destinations"],
    responses=problem_responses(401, 403, 404, 422, 503),
)

DestinationPath = Annotated[
    str,
    Path(
        min_length=3,
        max_length=MAX_DESTINATION_CHARS,
        description="`host:port` (the host lower-cased, a name in IDNA; `[v6]:port`)",
    ),
    NO_CONTROL_CHARS,
]


class DestinationIn(BaseModel):
    max_in_flight: int = Field(ge=1, le=100, description="attempts in flight at once, 1-100")
    per_second: float | None = Field(
        None, ge=0.1, le=1000, description="requests per second, 0.1-1000, or null: no rate"
    )


class DestinationOut(BaseModel):
    destination: str
    configured: bool = Field(description="false: the tenant set no policy, the defaults apply")
    max_in_flight: int
    per_second: float | None
    held_until: UtcTimestamp | None = Field(
        description="a 429 or 503 with Retry-After holds the destination until then (<= 1 h)"
    )
    current_rate: float | None = Field(
        description="the adaptive rate (requests/s) after a 429 without Retry-After; null: none"
    )
    in_flight: int = Field(description="attempts under way now, every worker's")
    updated_at: UtcTimestamp | None


class DestinationList(BaseModel):
    items: list[DestinationOut]
    next_cursor: str | None


def _out(v: svc.DestinationView) -> DestinationOut:
    return DestinationOut(
        destination=v.destination,
        configured=v.configured,
        max_in_flight=v.policy.max_in_flight,
        per_second=v.policy.per_second,
        held_until=v.state.held_until,
        current_rate=v.state.current_rate,
        in_flight=v.in_flight,
        updated_at=v.updated_at,
    )


@router.get(
    "/",
    operation_id="listDestinations",
    response_model=DestinationList,
    responses=problem_responses(400),
    summary="The tenant's destinations with a policy or a live state, by destination",
)
async def list_destinations(
    request: Request,
    principal: Principal = require(READ),
    limit: Annotated[int, Query(ge=1, le=svc.MAX_PAGE)] = 100,
    cursor: Annotated[str, Query(max_length=MAX_DESTINATION_CHARS), NO_CONTROL_CHARS] | None = None,
) -> DestinationList:
    ctx = context_of(request)
    views, next_cursor = await svc.list_destinations(
        ctx.uow_factory(),
        principal.tenant_id,
        ctx.destination_defaults,
        ctx.clock(),
        after=cursor,
        limit=limit,
    )
    return DestinationList(items=[_out(v) for v in views], next_cursor=next_cursor)


@router.get(
    "/{destination}",
    operation_id="getDestination",
    response_model=DestinationOut,
    summary="A destination's limits and live state (the defaults when no policy is set)",
)
async def get_destination(
    request: Request, destination: DestinationPath, principal: Principal = require(READ)
) -> DestinationOut:
    ctx = context_of(request)
    view = await svc.get_destination(
        ctx.uow_factory(), principal.tenant_id, destination, ctx.destination_defaults, ctx.clock()
    )
    return _out(view)


@router.put(
    "/{destination}",
    operation_id="putDestination",
    response_model=DestinationOut,
    responses={201: {"model": DestinationOut}, **problem_responses(400, 413, 415)},
    summary="Set the tenant's limits for a destination (201 created, 200 updated)",
)
async def put_destination(
    request: Request,
    response: Response,
    destination: DestinationPath,
    body: DestinationIn,
    principal: Principal = require_writer(WRITE),
) -> DestinationOut:
    ctx = context_of(request)
    created = await svc.put_destination(
        ctx.uow_factory(),
        principal.tenant_id,
        destination,
        max_in_flight=body.max_in_flight,
        per_second=body.per_second,
        max_destinations=ctx.max_destinations,
        now=ctx.clock(),
    )
    response.status_code = 201 if created else 200
    view = await svc.get_destination(
        ctx.uow_factory(), principal.tenant_id, destination, ctx.destination_defaults, ctx.clock()
    )
    return _out(view)


@router.delete(
    "/{destination}",
    operation_id="deleteDestination",
    status_code=204,
    responses=problem_responses(404),
    summary="Drop the tenant's limits for a destination (the defaults apply again)",
)
async def delete_destination(
    request: Request, destination: DestinationPath, principal: Principal = require_writer(WRITE)
) -> Response:
    ctx = context_of(request)
    await svc.delete_destination(ctx.uow_factory(), principal.tenant_id, destination, ctx.clock())
    return Response(status_code=204)
