"""Row mapping of the runs table: a Run to its row and back, and datetimes read back from
scalar subqueries (SQLite returns them as text)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduler.adapters.db.repository import completion_from_json
from scheduler.adapters.db.types import UTCDateTime
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.policies import (
    Action,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
    ScheduleState,
)
from scheduler.domain.run import CompletionStatus, Run, RunStatus, SkipReason, Trigger
from scheduler.domain.schedule import Target
from scheduler.service_layer.run_ports import DeliverySpec

SPEC_COLUMNS = (
    "id",
    "tenant_id",
    "name",
    "action",
    "state",
    "deleted_at",
    "target",
    "retry_policy",
    "overlap_policy",
    "misfire_policy",
    "next_run_at",
    "secret_ciphertext",
    "previous_secret_ciphertext",
    "previous_secret_expires_at",
    "completion",
)
"""The schedules columns a delivery spec is built from (`delivery_spec`)."""


def run_to_row(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "tenant_id": run.tenant_id,
        "schedule_id": run.schedule_id,
        "scheduled_for": run.scheduled_for,
        "trigger": run.trigger.value,
        "status": run.status.value,
        "skip_reason": None if run.skip_reason is None else run.skip_reason.value,
        "attempt_count": run.attempt_count,
        "next_attempt_at": run.next_attempt_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "lease_owner": run.lease_owner,
        "lease_expires_at": run.lease_expires_at,
        "payload": run.payload,
        "created_at": run.created_at,
        "due_at": run.due_at,
        "backfill_id": run.backfill_id,
        "replay_of": run.replay_of,
        "schedule_version": run.schedule_version,
    }


def row_to_run(row: Any) -> Run:
    m = row._mapping
    return Run(
        id=m["id"],
        tenant_id=m["tenant_id"],
        schedule_id=m["schedule_id"],
        scheduled_for=m["scheduled_for"],
        trigger=Trigger(m["trigger"]),
        status=RunStatus(m["status"]),
        skip_reason=None if m["skip_reason"] is None else SkipReason(m["skip_reason"]),
        attempt_count=m["attempt_count"],
        next_attempt_at=m["next_attempt_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        created_at=m["created_at"],
        payload=m["payload"],
        lease_owner=m["lease_owner"],
        lease_expires_at=m["lease_expires_at"],
        due_at=m.get("due_at"),
        backfill_id=m.get("backfill_id"),
        replay_of=m.get("replay_of"),
        schedule_version=m.get("schedule_version"),
        held_seconds=m.get("held_seconds") or 0.0,
        **completion_fields(m),
    )


def completion_fields(m: Any) -> dict[str, Any]:
    """A run's completion columns (`Run` fields of the same names); absent ones (a claim reads
    none) are None."""
    status = m.get("completion_status")
    return {
        "completion_deadline": m.get("completion_deadline"),
        "completion_attempt": m.get("completion_attempt"),
        "completion_token_hash": m.get("completion_token_hash"),
        "completion_status": None if status is None else CompletionStatus(status),
        "completed_at": m.get("completed_at"),
        "completion_detail": m.get("completion_detail"),
        "completion_output": m.get("completion_output"),
        "too_fast": bool(m.get("too_fast") or False),
    }


def delivery_spec(spec: dict[str, Any], box: SecretBox, now: datetime) -> DeliverySpec:
    """What an attempt needs of a schedule, from its SPEC_COLUMNS (`target` and `retry_policy`
    parsed): its current secret, and the previous one until it expires."""
    sid = spec["id"]
    secrets = box.signing_secrets(
        sid,
        spec["secret_ciphertext"],
        spec["previous_secret_ciphertext"],
        spec["previous_secret_expires_at"],
        now,
    )
    target = spec["target"]
    return DeliverySpec(
        schedule_id=sid,
        tenant_id=spec["tenant_id"],
        name=spec["name"],
        action=Action(spec["action"]),
        # A completed schedule's runs already planned finish normally (DESIGN §7a).
        active=spec["state"] != ScheduleState.PAUSED.value,
        deleted=spec["deleted_at"] is not None,
        target=None if target is None else Target(**target),
        retry_policy=RetryPolicy(**spec["retry_policy"]),
        overlap_policy=OverlapPolicy(spec["overlap_policy"]),
        secrets=tuple(secrets),
        misfire_policy=MisfirePolicy(spec["misfire_policy"]),
        next_run_at=spec["next_run_at"],
        completion=completion_from_json(spec.get("completion")),
    )


def as_datetime(value: Any) -> datetime | None:
    """Scalar subqueries bypass the column type on SQLite: parse the stored text."""
    if value is None:
        return None
    if isinstance(value, str):
        return UTCDateTime().process_result_value(value, None)  # type: ignore[arg-type]
    assert isinstance(value, datetime)
    return UTCDateTime().process_result_value(value, None)  # type: ignore[arg-type]
