"""What the terminal run events carry for analytics (trigger, status, attempts, error kind,
first attempt start, finish, summed delivery time; skipped runs with their reason)."""

from datetime import UTC, datetime, timedelta

from scheduler.domain.run import (
    RUN_SKIPPED,
    AttemptOutcome,
    ClaimFacts,
    Run,
    RunStatus,
    SkipReason,
    Trigger,
)

T0 = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def claimed(run: Run, owner: str, now: datetime) -> Run:
    """As `claim_due_runs` hands a run over: in_progress, first claim time kept."""
    run.status = RunStatus.IN_PROGRESS
    run.lease_owner = owner
    run.lease_expires_at = now + timedelta(seconds=30)
    run.started_at = run.started_at or now
    return run


def outcome(started: datetime, ms: int, *, ok: bool) -> AttemptOutcome:
    if ok:
        return AttemptOutcome(ok=True, started_at=started, duration_ms=ms, status_code=200)
    return AttemptOutcome(
        ok=False,
        started_at=started,
        duration_ms=ms,
        status_code=503,
        error_kind="http_status",
        error_message="HTTP 503",
        retryable=True,
    )


def test_retried_success_carries_every_analytics_field() -> None:
    run = Run.planned(tenant_id="ten_1", schedule_id="sch_1", scheduled_for=T0, now=at(-5))
    endpoint = "hooks.example.com:443"
    claimed(run, "w1", at(0.5))
    run.record_attempt("w1", outcome(at(0.5), 40, ok=False), at(0.6), 10.0, ClaimFacts(endpoint))
    claimed(run, "w2", at(10.6))
    # The second claim read the first attempt's 40 ms from its row.
    facts = ClaimFacts(endpoint, earlier_delivery_ms=40)
    run.record_attempt("w2", outcome(at(10.6), 15, ok=True), at(10.7), None, facts)
    (event,) = run.events
    assert event.type == "schedule.run.succeeded"
    assert event.data == {
        "trigger": "schedule",
        "status": "succeeded",
        "attempt_count": 2,
        "due_at": "2026-03-08T07:00:00Z",
        "first_attempt_at": "2026-03-08T07:00:00.500000Z",
        "finished_at": "2026-03-08T07:00:10.700000Z",
        "delivery_ms": 55,
        "endpoint": "hooks.example.com:443",
        "status_code": 200,
    }


def test_earlier_attempts_loaded_at_claim_count_toward_delivery_ms() -> None:
    # A run rebuilt from its row (a later claim) knows its earlier attempts' time only from
    # the claim's facts (the stored attempts' total).
    run = Run.planned(tenant_id="t", schedule_id="s", scheduled_for=T0, now=at(-5))
    run.attempt_count = 2
    claimed(run, "w", at(60))
    facts = ClaimFacts(earlier_delivery_ms=300)
    run.record_attempt("w", outcome(at(60), 25, ok=False), at(61), None, facts)
    (event,) = run.events
    assert event.data["delivery_ms"] == 325
    assert event.data["attempt_count"] == 3
    assert event.data["last_error"]["kind"] == "http_status"
    assert event.data["status"] == "failed"


def test_skip_at_plan_and_at_claim_emit_skipped_with_reason() -> None:
    born = Run.skipped(
        tenant_id="t", schedule_id="s", scheduled_for=T0, now=at(90), reason=SkipReason.MISFIRE
    )
    (event,) = born.events
    assert (event.type, event.run_id, event.scheduled_for) == (RUN_SKIPPED, born.id, T0)
    assert event.data == {
        "trigger": "schedule",
        "status": "skipped",
        "attempt_count": 0,
        "due_at": "2026-03-08T07:00:00Z",
        "first_attempt_at": None,
        "finished_at": "2026-03-08T07:01:30Z",
        "delivery_ms": 0,
        "endpoint": None,
        "skip_reason": "misfire",
    }
    manual = Run.planned(
        tenant_id="t", schedule_id="s", scheduled_for=T0, now=T0, trigger=Trigger.MANUAL
    )
    claimed(manual, "w", at(1))  # claimed, then found paused: never attempted
    manual.skip(SkipReason.SCHEDULE_PAUSED, at(1), owner="w")
    (event,) = manual.events
    assert event.data["first_attempt_at"] is None, "a claim without an attempt is no start"
    assert (event.data["trigger"], event.data["skip_reason"]) == ("manual", "schedule_paused")
