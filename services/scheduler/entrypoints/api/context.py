"""What the API needs from the composition root, carried on app.state (no globals)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastapi import Depends, Request

from authclient import Principal
from authclient.fastapi import require
from scheduler.domain.tenant import DEFAULT_ENTITLEMENTS, Entitlements
from scheduler.domain.versions import Actor, Source
from scheduler.entrypoints.api.middleware import Metrics
from scheduler.service_layer.schedules import Clock, LimitsProvider, SecretFactory
from scheduler.service_layer.unit_of_work import UnitOfWork, UnitOfWorkFactory
from servicekit.flow import DEFAULT_POLICY, DestinationPolicy
from servicekit.runtime.watchdog import Watchdog


@dataclass
class ApiContext:
    uow_factory: UnitOfWorkFactory
    clock: Clock
    new_secret: SecretFactory
    limits_for: LimitsProvider
    check_database: Callable[[], Awaitable[None]]
    allow_private_networks: bool
    rotation_grace: timedelta
    metrics: Metrics
    ensure_writable: Callable[[str], Awaitable[None]] | None = None
    """Raises TenantSuspended when the tenant may not write now (None: no tenant projection)."""
    watchdog: Watchdog | None = None
    """The in-process workers' (role `all`): readyz is 503 while one of their loops is overdue."""
    allowed_ports: frozenset[int] | None = None
    """Ports a target URL may name (WEBHOOK_ALLOWED_PORTS; None: webhookdeliver's default)."""
    destination_defaults: DestinationPolicy = DEFAULT_POLICY
    """A destination's limits when the tenant set none (SCHEDULER_DESTINATION_*)."""
    max_destinations: int = 1000
    """Destination policies one tenant may set (SCHEDULER_MAX_DESTINATIONS)."""

    def uows_as(
        self, principal: Principal, source: Source = Source.API
    ) -> Callable[[], UnitOfWork]:
        """Units of work acting for the token's subject: the versions of the schedules they
        change name it as their actor (DESIGN.md §7b)."""
        actor = Actor(principal.subject, source)
        return lambda: self.uow_factory(actor)


def context_of(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


@dataclass
class RunsApiContext:
    """What the runs and backfill routes need (`runs.install_runs` sets it)."""

    uows: UnitOfWorkFactory
    clock: Callable[[], datetime]
    wake: Callable[[], None] | None = None
    """Tell an in-process dispatcher that a run is due now."""
    default_limits: Entitlements = DEFAULT_ENTITLEMENTS
    """Limits of a tenant without an entitlements event (SCHEDULER_DEFAULT_*)."""


def runs_context_of(request: Request) -> RunsApiContext:
    ctx: RunsApiContext = request.app.state.runs_ctx
    return ctx


def require_writer(scope: str) -> Any:
    """Like `authclient.fastapi.require(scope)`, and refuses a suspended tenant's write with 403
    `tenant-suspended` (reads keep working: they use `require`)."""

    async def writer(request: Request, principal: Principal = require(scope)) -> Principal:
        check = context_of(request).ensure_writable
        if check is not None:
            await check(principal.tenant_id)
        return principal

    return Depends(writer)
