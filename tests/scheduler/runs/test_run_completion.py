"""The run's awaiting state (domain/run.py "Awaiting a completion"), pure: accept, complete
(succeeded, failed, final, too fast), time out, replay and conflict verdicts, early calls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.domain.completion import token_digest, token_matches
from scheduler.domain.run import (
    AttemptOutcome,
    CompletionReport,
    CompletionStatus,
    CompletionVerdict,
    LeaseLost,
    Run,
    RunStatus,
)

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
OWNER = "w:1"
OK = AttemptOutcome(ok=True, started_at=NOW, duration_ms=40, status_code=202)
SUCCEEDED = CompletionReport(CompletionStatus.SUCCEEDED, "done", {"rows": 3})
FAILED = CompletionReport(CompletionStatus.FAILED, "disk full")


def claimed() -> Run:
    run = Run.planned(tenant_id="t", schedule_id="sch_1", scheduled_for=NOW, now=NOW)
    run.status, run.lease_owner, run.started_at = RunStatus.IN_PROGRESS, OWNER, NOW
    run.lease_expires_at = NOW + timedelta(seconds=30)
    return run


def awaiting(deadline: timedelta = timedelta(minutes=10)) -> Run:
    run = claimed()
    run.issue_completion_token(OWNER, token_digest("rct_a"))
    run.record_attempt(OWNER, OK, NOW, None, await_until=NOW + deadline)
    return run


def test_an_accepted_attempt_awaits_without_a_lease_and_emits_nothing() -> None:
    run = awaiting()
    assert (run.status, run.lease_owner, run.lease_expires_at) == (
        RunStatus.IN_PROGRESS,
        None,
        None,
    )
    assert run.awaiting
    assert run.completion_deadline == NOW + timedelta(minutes=10)
    assert (run.attempt_count, run.completion_attempt) == (1, 1)
    assert run.events == []
    assert token_matches(run, "rct_a")
    assert not token_matches(run, "rct_b")
    assert not token_matches(run, "")


def test_succeeded_finishes_once_and_a_replay_changes_nothing() -> None:
    run = awaiting()
    at = NOW + timedelta(minutes=3)
    verdict = run.complete(SUCCEEDED, at, attempt_started_at=NOW, next_delay_seconds=10.0)
    assert verdict is CompletionVerdict.APPLIED
    assert (run.status, run.finished_at, run.completed_at) == (RunStatus.SUCCEEDED, at, at)
    assert (run.completion_detail, run.completion_output) == ("done", {"rows": 3})
    assert not run.awaiting
    assert run.completion_deadline is None
    assert [e.type for e in run.events] == ["schedule.run.succeeded"]
    (update,) = run.attempt_updates
    assert (update.number, update.error_kind, update.detail) == (1, None, "done")
    again = run.complete(SUCCEEDED, at, attempt_started_at=NOW, next_delay_seconds=None)
    assert again is CompletionVerdict.REPLAYED
    other = run.complete(FAILED, at, attempt_started_at=NOW, next_delay_seconds=None)
    assert other is CompletionVerdict.CONFLICT
    assert len(run.events) == 1


def test_failed_is_retried_by_the_delay_final_or_exhausted_fails() -> None:
    run = awaiting()
    run.complete(FAILED, NOW, attempt_started_at=NOW, next_delay_seconds=30.0)
    assert (run.status, run.next_attempt_at) == (RunStatus.RETRYING, NOW + timedelta(seconds=30))
    assert run.attempt_updates[0].error_kind == "completion_failed"
    assert run.events == []
    final = awaiting()
    report = CompletionReport(CompletionStatus.FAILED, "bad", final=True)
    final.complete(report, NOW, attempt_started_at=NOW, next_delay_seconds=30.0)
    assert final.status is RunStatus.FAILED
    assert final.events[0].data["last_error"]["kind"] == "completion_failed"
    exhausted = awaiting()
    exhausted.complete(FAILED, NOW, attempt_started_at=NOW, next_delay_seconds=None)
    assert exhausted.status is RunStatus.FAILED


def test_too_fast_still_succeeds_and_records_its_event() -> None:
    run = awaiting()
    at = NOW + timedelta(seconds=5)
    run.complete(
        SUCCEEDED, at, attempt_started_at=NOW, next_delay_seconds=None, min_duration_seconds=60
    )
    assert (run.status, run.too_fast) == (RunStatus.SUCCEEDED, True)
    assert [e.type for e in run.events] == ["schedule.run.succeeded", "schedule.run.too_fast"]
    slow = awaiting()
    slow.complete(
        SUCCEEDED,
        NOW + timedelta(seconds=60),
        attempt_started_at=NOW,
        next_delay_seconds=None,
        min_duration_seconds=60,
    )
    assert slow.too_fast is False
    assert [e.type for e in slow.events] == ["schedule.run.succeeded"]


def test_time_out_only_at_the_deadline_and_only_while_awaiting() -> None:
    run = awaiting(timedelta(seconds=60))
    assert not run.time_out(NOW + timedelta(seconds=59), 10.0)
    assert run.time_out(NOW + timedelta(seconds=60), 10.0)
    assert run.status is RunStatus.RETRYING
    assert run.completion_status is CompletionStatus.TIMED_OUT
    assert run.attempt_updates[0].error_kind == "completion_timeout"
    assert not run.time_out(NOW + timedelta(hours=1), 10.0)  # once
    late = run.complete(SUCCEEDED, NOW, attempt_started_at=NOW, next_delay_seconds=None)
    assert late is CompletionVerdict.CONFLICT


def test_a_call_before_the_acceptance_is_early_and_a_new_attempt_gets_a_new_token() -> None:
    run = claimed()
    run.issue_completion_token(OWNER, token_digest("rct_a"))
    early = run.complete(SUCCEEDED, NOW, attempt_started_at=NOW, next_delay_seconds=None)
    assert early is CompletionVerdict.EARLY
    run.record_attempt(OWNER, OK, NOW, None, await_until=NOW + timedelta(minutes=1))
    run.complete(FAILED, NOW, attempt_started_at=NOW, next_delay_seconds=1.0)
    run.status, run.lease_owner = RunStatus.IN_PROGRESS, OWNER  # claimed again
    run.issue_completion_token(OWNER, token_digest("rct_b"))
    assert (run.completion_attempt, run.completion_status) == (2, None)
    assert not token_matches(run, "rct_a")
    assert token_matches(run, "rct_b")
    with pytest.raises(LeaseLost):
        run.issue_completion_token("another", token_digest("rct_c"))


def test_a_report_is_bounded() -> None:
    with pytest.raises(ValueError, match="detail"):
        CompletionReport(CompletionStatus.SUCCEEDED, "d" * 1001)
    with pytest.raises(ValueError, match="succeeded or failed"):
        CompletionReport(CompletionStatus.TIMED_OUT)
