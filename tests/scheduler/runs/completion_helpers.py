"""Callback-mode schedules and completion calls for the completion tests."""

from __future__ import annotations

from typing import Any

import httpx
import sqlalchemy as sa

from scheduler.adapters.db.tables import outbox
from scheduler.bootstrap import Container
from scheduler.domain.definition import Target
from scheduler.domain.policies import (
    Action,
    BreakerPolicy,
    CompletionMode,
    CompletionPolicy,
    OverlapPolicy,
    RetryPolicy,
)
from scheduler.domain.schedule import Schedule
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer import schedules as schedule_svc
from tests.scheduler.definitions import definition
from tests.scheduler.runs.receiver import Receiver


async def add_callback_schedule(
    container: Container,
    url: str,
    *,
    timeout_seconds: int = 600,
    min_duration_seconds: int | None = None,
    max_attempts: int = 3,
    threshold: int = 5,
    overlap: OverlapPolicy = OverlapPolicy.ALLOW,
    name: str = "nightly-export",
) -> Schedule:
    spec = definition(
        name=name,
        cron="* * * * *",
        timezone="UTC",
        action=Action.WEBHOOK,
        target=Target(url=url, headers={"X-Team": "ops"}, timeout_seconds=10),
        payload={"job": name},
        retry_policy=RetryPolicy(
            max_attempts=max_attempts,
            initial_backoff_seconds=10.0,
            max_backoff_seconds=60.0,
            multiplier=2.0,
            max_retry_duration_seconds=86_400.0,
        ),
        overlap_policy=overlap,
        breaker=BreakerPolicy(failure_threshold=threshold),
        completion=CompletionPolicy(CompletionMode.CALLBACK, timeout_seconds, min_duration_seconds),
    )
    created = await schedule_svc.create_schedule(
        container.uow_factory(),
        spec,
        tenant_id="tenant-a",
        clock=container.clock,
        new_secret=container.new_secret,
        limits=Entitlements(max_schedules=100_000, min_interval_seconds=60),
    )
    return created.schedule


def completion_of(receiver: Receiver, index: int = -1) -> tuple[str, str, str]:
    """(run id, completion URL, token) of the receiver's `index`th request."""
    h = receiver.requests[index].headers
    return h["X-Webhook-Id"], h["X-Run-Complete-Url"], h["X-Run-Complete-Token"]


async def complete(
    client: httpx.AsyncClient, run_id: str, token: str, **body: Any
) -> httpx.Response:
    return await client.post(
        f"/v1/runs/{run_id}/complete",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
    )


async def events(container: Container, type_: str | None = None) -> list[sa.Row]:
    async with container.engine.connect() as conn:
        q = sa.select(outbox).order_by(outbox.c.id)
        if type_ is not None:
            q = q.where(outbox.c.type == type_)
        return list(await conn.execute(q))
