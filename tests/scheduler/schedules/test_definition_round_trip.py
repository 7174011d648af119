"""One shape for a schedule: every field of a definition goes API -> ScheduleDefinition -> row ->
ScheduleDefinition -> API unchanged, and the API shapes, the domain and the table name the same
fields. A field added to one of them without the others fails here.

BODY sets every field to a value other than its default (cron and run_at both: the mapping does
not validate, the service does), so a mapping that forgets a field and lets a default stand in is
caught too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.repository import definition_from_row, definition_to_row
from scheduler.adapters.db.tables import schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.definition import FIELD_NAMES, ScheduleDefinition
from scheduler.domain.schedule import Schedule
from scheduler.domain.timing import Timing
from scheduler.entrypoints.api.schedules import to_out
from scheduler.entrypoints.api.schemas import (
    PreviewIn,
    ScheduleCreate,
    ScheduleOut,
    SchedulePatch,
    changes_of,
    definition_of,
)

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SECRET = "whsec_dGhpcyBpcyBhIHRlc3Qgc2VjcmV0IG9mIDMyIGJ5dGVzISE="

BODY: dict[str, Any] = {
    "name": "nightly-report",
    "description": "the daily numbers",
    "cron": "0 3 * * 1-5",
    "run_at": "2026-04-01T03:00:07Z",
    "timezone": "Africa/Addis_Ababa",
    "dst_policy": "literal",
    "start_at": "2026-03-01T00:00:00Z",
    "end_at": "2026-12-31T23:59:59Z",
    "max_runs": 7,
    "jitter_seconds": 30,
    "action": "event",
    "target": {
        "url": "https://example.com/hook",
        "headers": {"X-Team": "ops"},
        "timeout_seconds": 20,
    },
    "payload": {"report": "daily", "n": [1, 2.5, None]},
    "retry_policy": {
        "max_attempts": 9,
        "initial_backoff_seconds": 2.0,
        "max_backoff_seconds": 60.0,
        "multiplier": 3.0,
        "max_retry_duration_seconds": 3600.0,
    },
    "misfire_policy": "skip",
    "overlap_policy": "buffer_one",
    "breaker": {"failure_threshold": 11},
    "completion": {"mode": "callback", "timeout_seconds": 900, "min_duration_seconds": 30},
    "labels": {"team": "billing", "example.com/tier": "gold-1"},
}
MINIMAL: dict[str, Any] = {"name": "n", "cron": "* * * * *", "timezone": "UTC"}
# The schedule's own columns and output fields, besides its definition's.
LIFE_COLUMNS = {
    "id",
    "tenant_id",
    "state",
    "paused_reason",
    "next_run_at",
    "created_at",
    "updated_at",
    "deleted_at",
    "version",
    "consecutive_failures",
    "planned_runs",
    "secret_ciphertext",
    "previous_secret_ciphertext",
    "previous_secret_expires_at",
    "key",
}
LIFE_OUTPUT = {
    "id",
    "key",
    "state",
    "paused_reason",
    "next_run_at",
    "created_at",
    "updated_at",
    "version",
}
# Read-side: from the schedule's runs and its breaker count, not from the definition.
LIFE_OUTPUT |= {"last_run", "next_occurrence_at", "consecutive_failures"}


def api_json(definition: ScheduleDefinition) -> dict[str, Any]:
    """The definition's fields of the API's answer, as JSON."""
    schedule = Schedule.create(
        id="sch_1", tenant_id="t1", definition=definition, next_run_at=None, now=NOW
    )
    out = ScheduleOut.model_validate(to_out(schedule)).model_dump(mode="json")
    return {name: out[name] for name in FIELD_NAMES}


def test_every_shape_names_the_same_fields() -> None:
    names = set(FIELD_NAMES)
    assert set(BODY) == names, "BODY must set every field"
    # The key addresses a schedule (set once, not part of what PUT by key compares) and the
    # secret is never stored as a definition field.
    assert set(ScheduleCreate.model_fields) == names | {"key", "secret"}
    assert set(SchedulePatch.model_fields) == names
    assert set(ScheduleOut.model_fields) == names | LIFE_OUTPUT
    # `destination` is the target's host:port, derived on save for flow control.
    assert {c.name for c in schedules.columns} == names | LIFE_COLUMNS | {"destination"}
    timing = {f.name for f in fields(Timing)}
    assert set(PreviewIn.model_fields) == timing | {"after", "count"}
    assert set(definition_to_row(definition_of(ScheduleCreate.model_validate(BODY)))) == names


def test_body_differs_from_every_default() -> None:
    defaults = ScheduleCreate.model_validate(MINIMAL).model_dump(mode="json")
    assert defaults["labels"] == {}
    assert defaults["key"] is None
    assert defaults["secret"] is None
    for name in FIELD_NAMES:
        assert BODY[name] != defaults[name], name


def test_api_to_row_and_back_keeps_every_field() -> None:
    definition = definition_of(ScheduleCreate.model_validate(BODY))
    back = definition_from_row(definition_to_row(definition))
    assert back == definition
    assert api_json(back) == BODY


@pytest.mark.parametrize("name", FIELD_NAMES)
def test_a_patch_of_each_field_changes_that_field_only(name: str) -> None:
    before = definition_of(ScheduleCreate.model_validate(MINIMAL))
    after = before.with_changes(changes_of(SchedulePatch.model_validate({name: BODY[name]})))
    assert api_json(after) == {**api_json(before), name: BODY[name]}


@pytest.fixture
async def uow_factory(database_url: str) -> AsyncIterator[SqlUnitOfWorkFactory]:
    engine = create_engine(database_url)
    yield SqlUnitOfWorkFactory(engine, SecretBox([b"k" * 32]))
    await engine.dispose()


async def test_stored_and_read_back_keeps_every_field(uow_factory: SqlUnitOfWorkFactory) -> None:
    definition = definition_of(ScheduleCreate.model_validate(BODY))
    schedule = Schedule.create(
        id="sch_1", tenant_id="t1", definition=definition, next_run_at=None, now=NOW
    )
    async with uow_factory() as uow:
        await uow.schedules.add(schedule, SECRET)
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.schedules.get("t1", "sch_1")
    assert stored is not None
    assert stored.definition == definition
    assert api_json(stored.definition) == BODY
