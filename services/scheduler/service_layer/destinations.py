"""The destinations use cases (DESIGN.md §7b "Flow control"): a tenant's policies per
destination and their live state. Tenant-scoped: another tenant's destination, even the same
host:port, is never read or changed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.domain.events import DESTINATION_DELETED, DESTINATION_UPDATED, destination_event
from scheduler.service_layer.errors import InvalidInput, NotFound, QuotaExceeded
from scheduler.service_layer.flow_ports import DestinationRecord
from scheduler.service_layer.unit_of_work import UnitOfWork
from servicekit.data.ids import new_id
from servicekit.data.pagination import InvalidCursor
from servicekit.flow import DestinationPolicy, FlowState, parse_destination, tenant_policy

MAX_PAGE = 1000


@dataclass(frozen=True)
class DestinationView:
    destination: str
    configured: bool
    policy: DestinationPolicy
    """The tenant's, or the defaults when it set none."""
    state: FlowState
    """As of now: an ended hold and an expired adaptive rate are not shown."""
    in_flight: int
    updated_at: datetime | None


def canonical(destination: str) -> str:
    try:
        return parse_destination(destination)
    except ValueError as exc:
        raise InvalidInput("destination", str(exc)) from None


def _view(
    destination: str,
    rec: DestinationRecord | None,
    defaults: DestinationPolicy,
    in_flight: int,
    now: datetime,
) -> DestinationView:
    if rec is None:
        return DestinationView(destination, False, defaults, FlowState(), in_flight, None)
    return DestinationView(
        destination,
        rec.policy is not None,
        rec.policy or defaults,
        rec.state.live(now),
        in_flight,
        rec.updated_at,
    )


async def get_destination(
    uow: UnitOfWork, tenant_id: str, destination: str, defaults: DestinationPolicy, now: datetime
) -> DestinationView:
    """Any valid destination answers: the defaults and no state when the tenant set nothing."""
    dest = canonical(destination)
    async with uow:
        rec = await uow.destinations.get(tenant_id, dest)
        n = await uow.destinations.in_flight([(tenant_id, dest)])
    return _view(dest, rec, defaults, n.get((tenant_id, dest), 0), now)


async def list_destinations(
    uow: UnitOfWork,
    tenant_id: str,
    defaults: DestinationPolicy,
    now: datetime,
    *,
    after: str | None,
    limit: int,
) -> tuple[list[DestinationView], str | None]:
    """The tenant's destinations with a policy or a state, by destination; the next page's
    cursor is the last destination (anything but a canonical destination is InvalidCursor)."""
    if after is not None:
        try:
            canonical = parse_destination(after)
        except ValueError:
            canonical = None
        if canonical != after:
            raise InvalidCursor("not a destination cursor")
    async with uow:
        recs = await uow.destinations.list(tenant_id, after=after, limit=limit + 1)
        page = recs[:limit]
        counts = await uow.destinations.in_flight([(tenant_id, r.destination) for r in page])
    views = [
        _view(r.destination, r, defaults, counts.get((tenant_id, r.destination), 0), now)
        for r in page
    ]
    return views, (page[-1].destination if len(recs) > limit else None)


async def put_destination(
    uow: UnitOfWork,
    tenant_id: str,
    destination: str,
    *,
    max_in_flight: int,
    per_second: float | None,
    max_destinations: int,
    now: datetime,
) -> bool:
    """Set the tenant's policy; True when the destination had none (created)."""
    dest = canonical(destination)
    try:
        policy = tenant_policy(max_in_flight, per_second)
    except ValueError as exc:
        field = "max_in_flight" if "max_in_flight" in str(exc) else "per_second"
        raise InvalidInput(field, str(exc)) from None
    async with uow:
        rec = await uow.destinations.get(tenant_id, dest)
        if rec is None or rec.policy is None:
            count = await uow.destinations.count_configured(tenant_id)
            if count >= max_destinations:
                raise QuotaExceeded("max_destinations", max_destinations, count + 1)
        await uow.destinations.put_policy(tenant_id, dest, policy, now)
        # Notification keeps a copy (its fan-out deliveries obey the same limits).
        data = {"destination": dest, "max_in_flight": max_in_flight, "per_second": per_second}
        uow.add_event(
            destination_event(new_id("evt", at=now), DESTINATION_UPDATED, tenant_id, now, data)
        )
        await uow.commit()
    return rec is None or rec.policy is None


async def delete_destination(
    uow: UnitOfWork, tenant_id: str, destination: str, now: datetime
) -> None:
    """Drop the tenant's policy (the defaults apply again; a live hold stays until it ends)."""
    dest = canonical(destination)
    async with uow:
        if not await uow.destinations.delete_policy(tenant_id, dest, now):
            raise NotFound("destination", dest)
        data = {"destination": dest}
        uow.add_event(
            destination_event(new_id("evt", at=now), DESTINATION_DELETED, tenant_id, now, data)
        )
        await uow.commit()
