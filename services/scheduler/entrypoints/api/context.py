"""What the API needs from the composition root, carried on app.state (no globals)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from fastapi import Request

from scheduler.entrypoints.api.middleware import Metrics
from scheduler.service_layer.schedules import Clock, LimitsProvider, SecretFactory
from scheduler.service_layer.unit_of_work import UnitOfWork


@dataclass
class ApiContext:
    uow_factory: Callable[[], UnitOfWork]
    clock: Clock
    new_secret: SecretFactory
    limits_for: LimitsProvider
    check_database: Callable[[], Awaitable[None]]
    allow_private_networks: bool
    rotation_grace: timedelta
    metrics: Metrics


def context_of(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx
