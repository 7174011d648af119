"""The run state machine: every legal transition, the illegal ones, leases and stale workers."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.domain.run import (
    RUN_FAILED,
    RUN_SUCCEEDED,
    AttemptOutcome,
    IllegalTransition,
    LeaseLost,
    Run,
    RunStatus,
    SkipReason,
    Trigger,
)

T0 = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
LEASE = 30.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def pending(scheduled_for: datetime = T0) -> Run:
    return Run.planned(
        tenant_id="ten_1", schedule_id="sch_1", scheduled_for=scheduled_for, now=at(-5)
    )


def ok(started: datetime) -> AttemptOutcome:
    return AttemptOutcome(ok=True, started_at=started, duration_ms=12, status_code=204)


def fail(started: datetime, *, retryable: bool = True, code: int | None = 503) -> AttemptOutcome:
    return AttemptOutcome(
        ok=False,
        started_at=started,
        duration_ms=40,
        status_code=code,
        error_kind="http_status",
        error_message=f"HTTP {code}",
        response_excerpt="busy",
        retryable=retryable,
    )


def claimed(owner: str = "w1", now: datetime = T0, run: Run | None = None) -> Run:
    """The run as the runs repository's `claim_due_runs` hands it over (the claim is SQL):
    in_progress under `owner` until now + LEASE, first start kept."""
    run = run or pending()
    run.status = RunStatus.IN_PROGRESS
    run.lease_owner = owner
    run.lease_expires_at = now + timedelta(seconds=LEASE)
    run.next_attempt_at = None
    run.started_at = run.started_at or now
    return run


# ---- planned / lease ------------------------------------------------------------------------


def test_planned_run_is_pending_and_due_at_scheduled_for() -> None:
    run = pending()
    assert run.status is RunStatus.PENDING
    assert run.trigger is Trigger.SCHEDULE
    assert run.next_attempt_at == T0
    assert run.id.startswith("run_")


def test_stale_worker_cannot_record_over_new_holder() -> None:
    run = claimed("w1")
    claimed("w2", at(LEASE + 1), run)
    with pytest.raises(LeaseLost):
        run.record_attempt("w1", ok(at(1)), at(LEASE + 2), None)
    assert run.attempt_count == 0
    assert run.new_attempts == []
    assert run.events == []
    run.record_attempt("w2", ok(at(LEASE + 1)), at(LEASE + 2), None)
    assert run.status is RunStatus.SUCCEEDED
    with pytest.raises(LeaseLost):
        run.record_attempt("w1", fail(at(1), retryable=False), at(LEASE + 3), None)
    assert run.status is RunStatus.SUCCEEDED
    assert run.attempt_count == 1


def test_owner_may_record_after_expiry_if_nobody_took_over() -> None:
    # The attempt did happen; refusing it would only cause a duplicate delivery.
    run = claimed("w1")
    run.record_attempt("w1", ok(at(1)), at(LEASE + 5), None)
    assert run.status is RunStatus.SUCCEEDED


# ---- record_attempt -------------------------------------------------------------------------


def test_success_finishes_and_emits_succeeded() -> None:
    run = claimed()
    attempt = run.record_attempt("w1", ok(at(0.1)), at(0.2), None)
    assert run.status is RunStatus.SUCCEEDED
    assert run.finished_at == at(0.2)
    assert run.lease_owner is None
    assert run.next_attempt_at is None
    assert attempt.number == 1
    assert attempt.status_code == 204
    assert run.new_attempts == [attempt]
    (event,) = run.events
    assert event.type == RUN_SUCCEEDED
    assert event.run_id == run.id
    assert event.scheduled_for == T0
    assert event.schedule_id == "sch_1"
    assert event.tenant_id == "ten_1"
    assert event.data["attempt_count"] == 1
    assert event.id.startswith("evt_")


def test_retryable_failure_with_delay_goes_retrying_then_retries() -> None:
    run = claimed()
    run.record_attempt("w1", fail(at(0.1)), at(0.2), 10.0)
    assert run.status is RunStatus.RETRYING
    assert run.next_attempt_at == at(10.2)
    assert run.events == []
    assert run.finished_at is None
    claimed("w2", at(10.2), run)
    attempt = run.record_attempt("w2", ok(at(10.3)), at(10.4), None)
    assert attempt.number == 2
    assert run.attempt_count == 2
    assert [a.number for a in run.new_attempts] == [1, 2]
    final: RunStatus = run.status  # mypy kept the narrowing from before the transitions
    assert final is RunStatus.SUCCEEDED
    assert run.events[0].data["attempt_count"] == 2


def test_exhausted_retryable_failure_fails_with_last_error() -> None:
    run = claimed()
    run.record_attempt("w1", fail(at(0.1)), at(0.2), None)
    assert run.status is RunStatus.FAILED
    assert run.finished_at == at(0.2)
    (event,) = run.events
    assert event.type == RUN_FAILED
    assert event.data["last_error"] == {
        "kind": "http_status",
        "message": "HTTP 503",
        "status_code": 503,
    }


def test_non_retryable_failure_fails_even_with_a_delay() -> None:
    run = claimed()
    run.record_attempt("w1", fail(at(0.1), retryable=False, code=404), at(0.2), 10.0)
    assert run.status is RunStatus.FAILED
    assert run.events[0].data["last_error"]["status_code"] == 404


def test_negative_delay_is_refused_without_changing_the_run() -> None:
    run = claimed()
    with pytest.raises(ValueError):
        run.record_attempt("w1", fail(at(0.1)), at(0.2), -1.0)
    assert run.status is RunStatus.IN_PROGRESS
    assert run.attempt_count == 0


def test_event_id_is_stable_for_the_run_and_outcome() -> None:
    a, b = claimed(), claimed()
    a.record_attempt("w1", ok(at(0.1)), at(0.2), None)
    b.id = a.id  # the same run rebuilt from storage and finished again (a retried transaction)
    b.record_attempt("w1", ok(at(0.1)), at(0.2), None)
    assert a.events[0].id == b.events[0].id


# ---- release / skip ---------------------------------------------------------------------------


def test_release_without_attempt_returns_to_pending() -> None:
    run = claimed()
    run.release("w1", at(1))
    assert run.status is RunStatus.PENDING
    assert run.started_at is None
    assert run.next_attempt_at == T0, "due again at once (scheduled_for has passed)"
    assert run.lease_owner is None


def test_release_after_attempts_is_retrying_due_now() -> None:
    run = claimed()
    run.record_attempt("w1", fail(at(0.1)), at(0.2), 5.0)
    claimed("w1b", at(5.2), run)
    run.release("w1b", at(6))
    assert run.status is RunStatus.RETRYING
    assert run.next_attempt_at == at(6)


def test_release_by_non_owner_is_refused() -> None:
    run = claimed()
    with pytest.raises(LeaseLost):
        run.release("w2", at(1))


@pytest.mark.parametrize("reason", list(SkipReason))
def test_pending_run_can_be_skipped(reason: SkipReason) -> None:
    run = pending()
    run.skip(reason, at(1))
    assert run.status is RunStatus.SKIPPED
    assert run.skip_reason is reason
    assert run.finished_at == at(1)
    (event,) = run.events
    assert (event.type, event.data["skip_reason"]) == ("schedule.run.skipped", reason.value)
    assert run.next_attempt_at is None


def test_retrying_run_stops_when_tenant_suspended() -> None:
    run = claimed()
    run.record_attempt("w1", fail(at(0.1)), at(0.2), 60.0)
    run.skip(SkipReason.TENANT_SUSPENDED, at(30))
    assert run.status is RunStatus.SKIPPED
    assert run.next_attempt_at is None
    assert run.attempt_count == 1, "the attempt already made stays on record"


def test_in_progress_run_is_skipped_only_by_its_owner() -> None:
    run = claimed()
    with pytest.raises(IllegalTransition):
        run.skip(SkipReason.OVERLAP, at(1))
    with pytest.raises(LeaseLost):
        run.skip(SkipReason.OVERLAP, at(1), owner="w2")
    run.skip(SkipReason.OVERLAP, at(1), owner="w1")
    assert run.status is RunStatus.SKIPPED
    assert run.lease_owner is None


def test_run_born_skipped() -> None:
    run = Run.skipped(
        tenant_id="ten_1",
        schedule_id="sch_1",
        scheduled_for=T0,
        now=at(100),
        reason=SkipReason.MISFIRE,
    )
    assert run.status is RunStatus.SKIPPED
    assert run.skip_reason is SkipReason.MISFIRE
    assert run.finished_at == at(100)
    assert run.next_attempt_at is None


# ---- terminal states refuse everything -------------------------------------------------------


def _terminal_runs() -> list[Run]:
    succeeded = claimed()
    succeeded.record_attempt("w1", ok(at(0.1)), at(0.2), None)
    failed = claimed()
    failed.record_attempt("w1", fail(at(0.1), retryable=False), at(0.2), None)
    skipped = pending()
    skipped.skip(SkipReason.QUOTA, at(0))
    return [succeeded, failed, skipped]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_terminal_runs_refuse_every_transition(index: int) -> None:
    run = _terminal_runs()[index]
    before = (run.status, run.attempt_count, run.finished_at, len(run.events))
    late = at(10_000)
    with pytest.raises(IllegalTransition):
        run.record_attempt("w1", ok(late), late, None)
    with pytest.raises(IllegalTransition):
        run.release("w1", late)
    with pytest.raises(IllegalTransition):
        run.skip(SkipReason.QUOTA, late, owner="w1")
    assert (run.status, run.attempt_count, run.finished_at, len(run.events)) == before


def test_pending_run_refuses_worker_writes() -> None:
    run = pending()
    with pytest.raises(LeaseLost):
        run.record_attempt("w1", ok(T0), T0, None)
    with pytest.raises(LeaseLost):
        run.release("w1", T0)


# ---- outcome value object --------------------------------------------------------------------


def test_outcome_consistency_is_checked() -> None:
    with pytest.raises(ValueError):
        AttemptOutcome(ok=False, started_at=T0, duration_ms=1)  # a failure needs its kind
    with pytest.raises(ValueError):
        AttemptOutcome(ok=True, started_at=T0, duration_ms=1, error_kind="timeout")
    with pytest.raises(ValueError):
        AttemptOutcome(ok=True, started_at=datetime(2026, 1, 1), duration_ms=1)  # naive


def test_manual_trigger_keeps_payload_snapshot() -> None:
    run = Run.planned(
        tenant_id="ten_1",
        schedule_id="sch_1",
        scheduled_for=T0,
        now=T0,
        trigger=Trigger.REPLAY,
        payload={"report": "daily"},
    )
    assert run.trigger is Trigger.REPLAY
    assert run.payload == {"report": "daily"}
    assert run.next_attempt_at == T0
