"""Helpers of the apply tests: definitions with keys, the call, and what the database holds."""

from __future__ import annotations

from typing import Any

import httpx
import sqlalchemy as sa

from scheduler.bootstrap import Container
from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body

APPLY = "/v1/schedules/apply"


def definition(key: str, **fields: Any) -> dict[str, Any]:
    return schedule_body(**{"key": key, "name": key.replace("/", "-"), **fields})


async def apply(
    client: httpx.AsyncClient,
    schedules: list[dict[str, Any]],
    *,
    prune: dict[str, str] | None = None,
    dry_run: bool = False,
    tenant: str = "tenant-a",
) -> httpx.Response:
    body: dict[str, Any] = {"schedules": schedules, "dry_run": dry_run}
    if prune is not None:
        body["prune"] = {"labels": prune}
    return await client.post(APPLY, json=body, headers=auth(tenant))


async def state(container: Container) -> dict[str, Any]:
    """Everything a write would change: rows of schedules, outbox and schedule_versions, every
    schedule's version and updated_at."""
    async with container.engine.connect() as conn:
        outbox = (await conn.execute(sa.text("SELECT count(*) FROM outbox"))).scalar_one()
        versions = (
            await conn.execute(sa.text("SELECT count(*) FROM schedule_versions"))
        ).scalar_one()
        rows = (
            await conn.execute(
                sa.text(
                    "SELECT id, tenant_id, key, version, updated_at, deleted_at FROM schedules "
                    "ORDER BY id"
                )
            )
        ).all()
    return {"outbox": outbox, "versions": versions, "schedules": [tuple(r) for r in rows]}


async def live(client: httpx.AsyncClient, tenant: str = "tenant-a") -> dict[str, dict[str, Any]]:
    """The tenant's live schedules by key (keyless ones under their id)."""
    r = await client.get("/v1/schedules/?limit=100", headers=auth(tenant))
    assert r.status_code == 200, r.text
    return {item["key"] or item["id"]: item for item in r.json()["items"]}
