"""The one outbox-row builder: payloads are `eventbus.envelope` as compact UTF-8 JSON, times in
UTC, and every writer (the unit of work's commit, the settle write on both dialects) stores
exactly that text."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from eventbus import decode, encode, envelope
from scheduler.adapters.db.outbox_rows import event_payload, outbox_row
from scheduler.adapters.db.tables import outbox
from scheduler.bootstrap import Container
from scheduler.domain.events import DomainEvent
from scheduler.domain.run import AttemptOutcome, Run, Trigger
from scheduler.service_layer.settle import Completion, settle_completions
from tests.scheduler.runs.conftest import T0, add_schedule
from tests.scheduler.runs.dispatch_helpers import claim_runs

CEST = timezone(timedelta(hours=2))


def test_a_schedule_event_is_the_envelope_byte_for_byte() -> None:
    event = DomainEvent(
        id="evt_1",
        type="schedule.paused",
        tenant_id="t1",
        time=datetime(2026, 3, 8, 9, 0, tzinfo=CEST),
        schedule_id="sch_1",
        data={"name": "nächtlich", "paused_reason": None},
    )
    assert event_payload(event) == (
        '{"id":"evt_1","type":"schedule.paused","tenant_id":"t1",'
        '"time":"2026-03-08T07:00:00Z","schedule_id":"sch_1",'
        '"data":{"name":"nächtlich","paused_reason":null}}'
    )
    row = outbox_row(event)
    assert (row["event_id"], row["topic"], row["key"], row["type"]) == (
        "evt_1",
        "schedule-events",
        "sch_1",
        "schedule.paused",
    )


def test_a_run_event_carries_run_id_and_scheduled_for_in_utc() -> None:
    event = DomainEvent(
        id="evt_2",
        type="schedule.run.succeeded",
        tenant_id="t1",
        time=datetime(2026, 3, 8, 7, 0, 1, tzinfo=UTC),
        schedule_id="sch_1",
        data={"attempt_count": 1},
        run_id="run_1",
        scheduled_for=datetime(2026, 3, 8, 9, 0, tzinfo=CEST),
    )
    payload = event_payload(event)
    expected = envelope(
        id="evt_2",
        type="schedule.run.succeeded",
        tenant_id="t1",
        time=datetime(2026, 3, 8, 7, 0, 1, tzinfo=UTC),
        schedule_id="sch_1",
        run_id="run_1",
        scheduled_for=datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
        data={"attempt_count": 1},
    )
    assert payload.encode() == encode(expected)
    assert decode(payload.encode())["scheduled_for"] == "2026-03-08T07:00:00Z"


async def test_every_writer_stores_the_builders_text(container: Container) -> None:
    """A schedule created through the unit of work and a run settled through settle_leased (one
    statement on PostgreSQL, multi-row on SQLite): the stored payloads are the builder's."""
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    at = T0 + timedelta(seconds=1)
    run = Run.planned(
        tenant_id=s.tenant_id,
        schedule_id=s.id,
        scheduled_for=T0,
        now=T0,
        trigger=Trigger.MANUAL,
    )
    async with container.uow_factory() as uow:
        await uow.runs.insert_runs([run])
        (held,) = await claim_runs(uow.runs, "w:1", at, at + timedelta(seconds=30), 1)
        await uow.commit()
    held.record_attempt(
        "w:1", AttemptOutcome(ok=True, started_at=at, duration_ms=1, status_code=200), at, None
    )
    completion = Completion.of(held, "w:1")
    written: list[DomainEvent] = list(completion.events)
    await settle_completions(container.uow_factory, [completion], at)
    async with container.engine.connect() as conn:
        stored = {r.event_id: r for r in await conn.execute(sa.select(outbox))}
    (created,) = [r for r in stored.values() if r.type == "schedule.created"]
    parsed: dict[str, Any] = json.loads(created.payload)
    assert parsed["schedule_id"] == s.id
    assert list(parsed) == ["id", "type", "tenant_id", "time", "schedule_id", "data"]
    for event in written:
        assert stored[event.id].payload == event_payload(event)
