"""The run lifecycle (DESIGN.md §5-§6): one run per planned occurrence, attempted until it succeeds
or is exhausted. Pure: every transition takes `now`; nothing here reads a clock or does I/O.

State machine (anything else raises `IllegalTransition`):

    Run.planned            -> pending
    Run.skipped            -> skipped (misfire, overlap, tenant_suspended, quota at plan time)
    pending   --acquire        -> in_progress   (only once due_at <= now)
    retrying  --acquire        -> in_progress   (only once next_attempt_at <= now)
    in_progress(lease expired) --acquire -> in_progress under the new owner (its worker died);
                               the lost attempt is counted and recorded (`LOST_ATTEMPT_KIND`)
    in_progress --fail_lost    -> failed (its lease expired the maximum number of times, or
                               the lost attempt used up the retry policy's max_attempts)
    in_progress --record_attempt -> succeeded | retrying | failed (failed = dead letter)
    in_progress --record_attempt(ok, await_until) -> in_progress, awaiting its completion call
                               (callback mode: no lease, `completion_deadline` set)
    awaiting  --complete(succeeded)          -> succeeded
    awaiting  --complete(failed) | time_out  -> retrying | failed
    in_progress --release      -> pending (no attempt yet) | retrying (due now)
    pending | retrying | in_progress(owner) --skip -> skipped
    succeeded, failed, skipped: terminal.

Leases: acquiring is set-based SQL (the runs repository's `claim_due_runs` and
`extend_run_leases`): it writes `lease_owner` and `lease_expires_at`. Every later
write by a worker names its `owner` and is refused (`LeaseLost`) unless the run is still
in_progress under that owner, so a worker whose lease expired and was taken over cannot overwrite
the new holder's result. Use a fresh owner token per claim (e.g. worker id + `new_id("lse")`),
so a worker that re-claims its own expired run is not confused with its earlier self. The SQL
layer must write with the same condition (`UPDATE ... WHERE id = :id AND status = 'in_progress'
AND lease_owner = :owner`) and treat 0 rows as `LeaseLost`.

Dispatch index: a pending run has `next_attempt_at = due_at` (scheduled_for plus jitter) and a
retrying run the time of its next attempt, so "due" is `status IN ('pending', 'retrying') AND
next_attempt_at <= now` plus `status = 'in_progress' AND lease_expires_at <= now`. An
in_progress run's `next_attempt_at` is the time the attempt under way was claimed.

Lost attempts: a worker that dies (or stops renewing its lease) after claiming a run may have
sent its attempt. Whoever acquires the expired run counts that attempt (`attempt_count + 1`) and
records it with `error_kind = LOST_ATTEMPT_KIND`, started at its claim time, so the next attempt
goes out with the next `X-Attempt` and the attempt log shows what the receiver may have seen.
A lost attempt counts toward `max_attempts` like any other: when it was the last one the run
fails `worker_lost` at the take-over (`fail_lost`) instead of being attempted once more.

Awaiting a completion (DESIGN.md §7b "Completion"): in callback mode a 2xx only says the
receiver accepted the job. The run stays `in_progress` (unfinished for the overlap policies: a
buffer_one successor waits for it) but holds no lease and no dispatcher slot for hours: its
`lease_owner` and `lease_expires_at` are None, so the claim never takes it (a lease "expires"
only when it has an end), and `completion_deadline` says until when it waits. Before each
callback-mode attempt the worker issues a token for THAT attempt (`issue_completion_token`,
stored as its SHA-256): a retry's delivery carries a new one and the older token stops working,
so a late call about an attempt already given up on cannot settle its successor. The completion
call (`complete`) or the watchdog (`time_out`) ends the awaiting: success finishes the run; a
failure (or the deadline) is a failed attempt, retried by the retry policy unless `final`.
`completion_status` remembers how the token's attempt ended, so the same call again is a
harmless replay (`CompletionVerdict.REPLAYED`) and a different one a conflict. Each end updates
the attempt's row (`attempt_updates`): when, the caller's detail and output, and for a failure
its error kind (`completion_failed`, `completion_timeout`).

Events: a run that reaches a terminal status records one event in `events`:
`schedule.run.succeeded`, `schedule.run.failed` or `schedule.run.skipped` (with its reason);
attempts made by a transition go to `new_attempts`. The unit of work writes both (outbox,
delivery_attempt rows) in the run's transaction and clears them. Every terminal event carries
what run analytics needs (`finish_data`), so a consumer never has to read the runs table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from scheduler.domain.events import DomainEvent
from servicekit.data.ids import new_id, stable_id
from servicekit.data.timestamps import format_utc

RUN_SUCCEEDED = "schedule.run.succeeded"
RUN_FAILED = "schedule.run.failed"
RUN_SKIPPED = "schedule.run.skipped"
RUN_TOO_FAST = "schedule.run.too_fast"
"""A callback-mode run completed sooner than its schedule's `min_duration_seconds`."""
COMPLETION_FAILED_KIND = "completion_failed"
"""The error kind of an accepted attempt whose completion call said `failed`."""
COMPLETION_TIMEOUT_KIND = "completion_timeout"
"""The error kind of an accepted attempt with no completion call by its deadline."""
MAX_COMPLETION_DETAIL_CHARS = 1000
MAX_COMPLETION_OUTPUT_BYTES = 16_384


class RunStatus(StrEnum):
    PENDING = "pending"
    """Planned; waits for `scheduled_for` and a dispatcher."""
    IN_PROGRESS = "in_progress"
    """Claimed under a lease; an attempt is (or was) being made."""
    RETRYING = "retrying"
    """An attempt failed retryably; waits for `next_attempt_at`."""
    SUCCEEDED = "succeeded"
    """Terminal: a 2xx arrived (webhook) or the broker acknowledged the event."""
    FAILED = "failed"
    """Terminal: exhausted or not retryable; listed as a dead letter, replayable."""
    SKIPPED = "skipped"
    """Terminal: never attempted (or attempts stopped); `skip_reason` says why."""

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.SKIPPED})


class Trigger(StrEnum):
    SCHEDULE = "schedule"
    """Planned from the schedule's occurrences; unique per (schedule_id, scheduled_for)."""
    MANUAL = "manual"
    """POST .../trigger: run now, outside the plan."""
    REPLAY = "replay"
    """POST .../runs/{id}/replay: a new run with the replayed run's payload."""
    BACKFILL = "backfill"
    """POST .../backfill: a past occurrence run on request; one per (schedule, occurrence,
    backfill request) and claimed in a lower-priority lane than every other run."""


class SkipReason(StrEnum):
    MISFIRE = "misfire"
    """Missed while the scheduler was down or behind; dropped by misfire_policy."""
    OVERLAP = "overlap"
    """overlap_policy skip and the previous run was unfinished."""
    TENANT_SUSPENDED = "tenant_suspended"
    """The tenant was suspended at scheduled_for (or, for a retry, when it came due)."""
    QUOTA = "quota"
    """The tenant's max_runs_per_day was used up."""
    SCHEDULE_PAUSED = "schedule_paused"
    """A planned run came due after its schedule was paused (pausing means "no intent")."""
    SCHEDULE_DELETED = "schedule_deleted"
    """The run came due after its schedule was deleted."""


class CompletionStatus(StrEnum):
    """How an accepted attempt's awaiting ended."""

    SUCCEEDED = "succeeded"
    """The completion call said the job succeeded."""
    FAILED = "failed"
    """The completion call said the job failed."""
    TIMED_OUT = "timed_out"
    """No completion call came by the deadline."""


class CompletionVerdict(StrEnum):
    """What a completion call did to the run (`Run.complete`)."""

    APPLIED = "applied"
    """It ended the awaiting."""
    REPLAYED = "replayed"
    """The same status as the call that already ended this attempt: nothing changes."""
    CONFLICT = "conflict"
    """The attempt already ended otherwise (another status, or its deadline passed)."""
    EARLY = "early"
    """The attempt's acceptance is not written yet (the call raced the worker's write)."""


@dataclass(frozen=True)
class CompletionReport:
    """A completion call's body, validated at the edge (detail and output bounded there)."""

    status: CompletionStatus
    detail: str | None = None
    output: Any = None
    final: bool = False

    def __post_init__(self) -> None:
        if self.status is CompletionStatus.TIMED_OUT:
            raise ValueError("a completion call says succeeded or failed")
        if self.detail is not None and len(self.detail) > MAX_COMPLETION_DETAIL_CHARS:
            raise ValueError(f"detail is longer than {MAX_COMPLETION_DETAIL_CHARS} characters")


@dataclass(frozen=True)
class AttemptCompletion:
    """What the end of an awaiting writes on its attempt's row."""

    run_id: str
    number: int
    completed_at: datetime
    detail: str | None
    output: Any
    error_kind: str | None
    error_message: str | None


class RunError(Exception):
    """Base of the run aggregate's errors; the API maps them, the domain knows no HTTP."""


class IllegalTransition(RunError):
    """The transition is not allowed from the run's current status."""


class LeaseLost(IllegalTransition):
    """The caller no longer holds the run's lease (expired and taken over, or never held)."""


def _aware(name: str, value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return value


@dataclass(frozen=True)
class AttemptOutcome:
    """What one delivery attempt produced. Its text arrives bounded: the performers build it
    through `webhookdeliver`'s attempt bounds (the one owner of them; the domain does not import
    webhookdeliver).

    `retryable` is the mechanism's verdict (network error, timeout, 408, 429, 5xx);
    `retry_after_seconds` is the receiver's Retry-After, for the caller's backoff computation.
    """

    ok: bool
    started_at: datetime
    duration_ms: int
    status_code: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    response_excerpt: str | None = None
    retryable: bool = False
    retry_after_seconds: float | None = None

    def __post_init__(self) -> None:
        _aware("started_at", self.started_at)
        if self.duration_ms < 0:
            raise ValueError("duration_ms must be >= 0")
        if self.ok and self.error_kind is not None:
            raise ValueError("a successful attempt has no error_kind")
        if not self.ok and self.error_kind is None:
            raise ValueError("a failed attempt needs an error_kind")


LOST_ATTEMPT_KIND = "worker_lost"
"""The error kind of an attempt whose worker was lost before it recorded the outcome."""
DEFAULT_MAX_LEASE_EXPIRIES = 5
LOST_ATTEMPT_MESSAGE = (
    "the worker making this attempt stopped renewing its lease (it crashed or lost the "
    "database); whether the request reached the target is unknown"
)


@dataclass(frozen=True)
class Attempt:
    """One delivery_attempt row; `number` is 1-based and attempts are listed in number order."""

    run_id: str
    number: int
    started_at: datetime
    duration_ms: int
    status_code: int | None
    error_kind: str | None
    error_message: str | None
    response_excerpt: str | None
    completed_at: datetime | None = None
    """Callback mode: when its awaiting ended (the completion call, or the deadline)."""
    completion_detail: str | None = None
    completion_output: Any = None


@dataclass(frozen=True, slots=True)
class ClaimFacts:
    """What a run's terminal event says that is not in its row, read by the claim that took it
    (domain/claiming.py): its webhook's `host:port` and the time its earlier attempts took."""

    endpoint: str | None = None
    """`host:port` a webhook run delivers to (None for event actions)."""
    earlier_delivery_ms: int = 0
    """The stored attempts' durations summed (a retried run's earlier attempts)."""


NO_FACTS = ClaimFacts()


@dataclass(eq=False)
class Run:
    """The run aggregate. Build new ones with `Run.planned` / `Run.skipped`; the repository may
    rebuild stored ones with the constructor (then `events` and `new_attempts` start empty)."""

    id: str
    tenant_id: str
    schedule_id: str
    scheduled_for: datetime
    trigger: Trigger
    status: RunStatus
    skip_reason: SkipReason | None = None
    attempt_count: int = 0
    next_attempt_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    created_at: datetime | None = None
    payload: Mapping[str, Any] | None = None
    """Payload snapshot for a replay; None means "the schedule's payload when attempted"."""
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    due_at: datetime | None = None
    """When the first attempt may start: scheduled_for plus the schedule's jitter offset
    (DESIGN.md §7a); None (rows from before jitter) means scheduled_for."""
    backfill_id: str | None = None
    """The backfill request a backfill run belongs to (its uniqueness with the occurrence)."""
    replay_of: str | None = None
    """The run a replay run replays (its id); None on every other run."""
    schedule_version: int | None = None
    """The schedule's version that planned it (manual, replay, backfill: current when asked
    for); None on runs from before versions."""
    completion_deadline: datetime | None = None
    """Set while an accepted attempt awaits its completion call (callback mode)."""
    completion_attempt: int | None = None
    """The attempt the current completion token was issued for."""
    completion_token_hash: str | None = field(default=None, repr=False)
    """SHA-256 (hex) of that token; the token itself is never stored."""
    completion_status: CompletionStatus | None = None
    """How `completion_attempt`'s awaiting ended (None: not ended, or never accepted)."""
    completed_at: datetime | None = None
    """When the last completion call (or the deadline) ended an awaiting."""
    completion_detail: str | None = None
    completion_output: Any = None
    too_fast: bool = False
    """It completed sooner than the schedule's min_duration_seconds (it still succeeded)."""
    held_seconds: float = 0.0
    """How long flow control kept it back after its first attempt (holds, a destination's
    rate or in-flight limit): not counted toward max_retry_duration_seconds."""
    events: list[DomainEvent] = field(default_factory=list)
    new_attempts: list[Attempt] = field(default_factory=list)
    attempt_updates: list[AttemptCompletion] = field(default_factory=list)

    # ---- creation -------------------------------------------------------------------------

    @classmethod
    def planned(
        cls,
        *,
        tenant_id: str,
        schedule_id: str,
        scheduled_for: datetime,
        now: datetime,
        trigger: Trigger = Trigger.SCHEDULE,
        payload: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        due_at: datetime | None = None,
        schedule_version: int | None = None,
    ) -> Run:
        """A pending run, due at `due_at` (default `scheduled_for`; a manual trigger or replay
        passes `now`): no attempt starts before it."""
        _aware("scheduled_for", scheduled_for)
        _aware("now", now)
        due = scheduled_for if due_at is None else due_at
        _aware("due_at", due)
        return cls(
            id=run_id or new_id("run", at=now),
            tenant_id=tenant_id,
            schedule_id=schedule_id,
            scheduled_for=scheduled_for,
            trigger=trigger,
            status=RunStatus.PENDING,
            next_attempt_at=due,
            created_at=now,
            payload=payload,
            due_at=due,
            schedule_version=schedule_version,
        )

    @classmethod
    def skipped(
        cls,
        *,
        tenant_id: str,
        schedule_id: str,
        scheduled_for: datetime,
        now: datetime,
        reason: SkipReason,
        trigger: Trigger = Trigger.SCHEDULE,
        run_id: str | None = None,
        schedule_version: int | None = None,
    ) -> Run:
        """A run recorded as skipped at plan time, so the occurrence is never silently lost.
        Its `schedule.run.skipped` event is in `events`: the planner writes it with the row."""
        _aware("scheduled_for", scheduled_for)
        _aware("now", now)
        run = cls(
            id=run_id or new_id("run", at=now),
            tenant_id=tenant_id,
            schedule_id=schedule_id,
            scheduled_for=scheduled_for,
            trigger=trigger,
            status=RunStatus.SKIPPED,
            skip_reason=SkipReason(reason),
            finished_at=now,
            created_at=now,
            schedule_version=schedule_version,
        )
        run._record_event(RUN_SKIPPED, now, {"skip_reason": str(run.skip_reason)})
        return run

    # ---- queries --------------------------------------------------------------------------

    @property
    def due(self) -> datetime:
        """When the first attempt may start (`due_at`, or scheduled_for for older rows)."""
        return self.scheduled_for if self.due_at is None else self.due_at

    def holds_lease(self, owner: str) -> bool:
        return self.status is RunStatus.IN_PROGRESS and self.lease_owner == owner

    @property
    def awaiting(self) -> bool:
        """An accepted attempt awaits its completion call (in_progress without a lease)."""
        return (
            self.status is RunStatus.IN_PROGRESS
            and self.lease_owner is None
            and self.completion_deadline is not None
        )

    # ---- transitions ----------------------------------------------------------------------

    def release(self, owner: str, now: datetime) -> None:
        """Give the run back without an attempt (clean shutdown): claimable again at once."""
        _aware("now", now)
        self._require_lease(owner)
        self._drop_lease()
        if self.attempt_count == 0:
            self.status = RunStatus.PENDING
            self.next_attempt_at = self.due
            self.started_at = None
        else:
            self.status = RunStatus.RETRYING
            self.next_attempt_at = now

    def wait(self, owner: str, until: datetime) -> None:
        """Give a first attempt back unattempted to wait for the schedule's previous run
        (overlap_policy buffer_one): pending again, due at `until` at the latest (finishing the
        previous run makes it due at once: `RunRepository.wake_waiting`)."""
        _aware("until", until)
        self._require_lease(owner)
        if self.attempt_count != 0:
            raise IllegalTransition("only a run not yet attempted waits for its predecessor")
        self._drop_lease()
        self.status = RunStatus.PENDING
        self.next_attempt_at = max(until, self.due)
        self.started_at = None

    def record_attempt(
        self,
        owner: str,
        outcome: AttemptOutcome,
        now: datetime,
        next_delay_seconds: float | None,
        facts: ClaimFacts = NO_FACTS,
        *,
        await_until: datetime | None = None,
    ) -> Attempt:
        """Record one attempt made under `owner`'s lease and move the run:
        ok -> succeeded (with `await_until`, callback mode: in_progress awaiting its completion
        call until then, lease dropped); not ok and retryable with a delay -> retrying at
        `now + delay`; otherwise (not retryable, or `next_delay_seconds` None = backoff
        exhausted) -> failed.

        The caller computes the delay from the schedule's retry policy (attempt count, elapsed
        time since scheduled_for, Retry-After) and passes None when exhausted; `facts` are its
        claim's, for the terminal event.
        """
        _aware("now", now)
        self._require_lease(owner)
        if next_delay_seconds is not None and not next_delay_seconds >= 0:
            raise ValueError("next_delay_seconds must be >= 0 or None")
        self.attempt_count += 1
        attempt = Attempt(
            run_id=self.id,
            number=self.attempt_count,
            started_at=outcome.started_at,
            duration_ms=outcome.duration_ms,
            status_code=outcome.status_code,
            error_kind=outcome.error_kind,
            error_message=outcome.error_message,
            response_excerpt=outcome.response_excerpt,
        )
        self.new_attempts.append(attempt)
        self._drop_lease()
        if outcome.ok and await_until is not None:
            _aware("await_until", await_until)
            self.completion_deadline = await_until
        elif outcome.ok:
            self._finish(RunStatus.SUCCEEDED, now)
            code = {"status_code": outcome.status_code}
            self._record_event(RUN_SUCCEEDED, now, code, facts, outcome.duration_ms)
        elif outcome.retryable and next_delay_seconds is not None:
            self.status = RunStatus.RETRYING
            self.next_attempt_at = now + timedelta(seconds=next_delay_seconds)
        else:
            self._finish(RunStatus.FAILED, now)
            last_error = {
                "kind": outcome.error_kind,
                "message": outcome.error_message,
                "status_code": outcome.status_code,
            }
            error = {"last_error": last_error}
            self._record_event(RUN_FAILED, now, error, facts, outcome.duration_ms)
        return attempt

    def issue_completion_token(self, owner: str, token_hash: str) -> None:
        """Before a callback-mode attempt: the token its delivery carries is for this attempt
        (the next number) alone; an earlier attempt's token stops working."""
        self._require_lease(owner)
        self.completion_attempt = self.attempt_count + 1
        self.completion_token_hash = token_hash
        self.completion_status = None

    def complete(
        self,
        report: CompletionReport,
        now: datetime,
        *,
        attempt_started_at: datetime,
        next_delay_seconds: float | None,
        min_duration_seconds: int | None = None,
        facts: ClaimFacts = NO_FACTS,
    ) -> CompletionVerdict:
        """A completion call for the current token's attempt (the caller checked the token).
        Awaiting: succeeded finishes the run (`too_fast` when sooner than
        `min_duration_seconds` after `attempt_started_at`); failed is a failed attempt,
        retrying after `next_delay_seconds` unless `report.final` or None (exhausted).
        Otherwise nothing changes and the verdict says why."""
        _aware("now", now)
        if not self.awaiting:
            return self._verdict_when_not_awaiting(report)
        elapsed = (now - attempt_started_at).total_seconds()
        if report.status is CompletionStatus.SUCCEEDED:
            self._end_awaiting(CompletionStatus.SUCCEEDED, now, report.detail, report.output)
            self._finish(RunStatus.SUCCEEDED, now)
            self.too_fast = min_duration_seconds is not None and elapsed < min_duration_seconds
            completion = self._completion_data()
            data = {"status_code": None, "completion": completion, "too_fast": self.too_fast}
            self._record_event(RUN_SUCCEEDED, now, data, facts)
            if self.too_fast:
                extra = {"min_duration_seconds": min_duration_seconds, "duration_seconds": elapsed}
                self._record_event(RUN_TOO_FAST, now, extra, facts)
            return CompletionVerdict.APPLIED
        message = report.detail or "the completion call said the job failed"
        delay = None if report.final else next_delay_seconds
        self._end_awaiting(
            CompletionStatus.FAILED,
            now,
            report.detail,
            report.output,
            error=(COMPLETION_FAILED_KIND, message[:500]),
        )
        self._retry_or_fail(now, delay, COMPLETION_FAILED_KIND, message[:500], facts)
        return CompletionVerdict.APPLIED

    def time_out(
        self, now: datetime, next_delay_seconds: float | None, facts: ClaimFacts = NO_FACTS
    ) -> bool:
        """The watchdog: an awaiting run past its deadline has a failed attempt
        (`completion_timeout`), retried like any other. False (nothing changes) when it is not
        awaiting or its deadline is still ahead."""
        _aware("now", now)
        if not self.awaiting or self.completion_deadline is None or now < self.completion_deadline:
            return False
        message = f"no completion call by the deadline {format_utc(self.completion_deadline)}"
        error = (COMPLETION_TIMEOUT_KIND, message)
        self._end_awaiting(CompletionStatus.TIMED_OUT, now, None, None, error=error)
        self._retry_or_fail(now, next_delay_seconds, COMPLETION_TIMEOUT_KIND, message, facts)
        return True

    def _verdict_when_not_awaiting(self, report: CompletionReport) -> CompletionVerdict:
        if self.completion_status is not None and self.completion_status == report.status:
            return CompletionVerdict.REPLAYED
        early = (
            self.status is RunStatus.IN_PROGRESS
            and self.lease_owner is not None
            and self.completion_status is None
            and self.completion_attempt == self.attempt_count + 1
        )
        return CompletionVerdict.EARLY if early else CompletionVerdict.CONFLICT

    def _end_awaiting(
        self,
        status: CompletionStatus,
        now: datetime,
        detail: str | None,
        output: Any,
        *,
        error: tuple[str, str] | None = None,
    ) -> None:
        assert self.completion_attempt is not None
        self.completion_deadline = None
        self.completion_status = status
        self.completed_at = now
        self.completion_detail = detail
        self.completion_output = output
        kind, message = (None, None) if error is None else error
        self.attempt_updates.append(
            AttemptCompletion(self.id, self.completion_attempt, now, detail, output, kind, message)
        )

    def _retry_or_fail(
        self, now: datetime, delay: float | None, kind: str, message: str, facts: ClaimFacts
    ) -> None:
        if delay is not None:
            if not delay >= 0:
                raise ValueError("next_delay_seconds must be >= 0 or None")
            self.status = RunStatus.RETRYING
            self.next_attempt_at = now + timedelta(seconds=delay)
            return
        self._finish(RunStatus.FAILED, now)
        last_error = {"kind": kind, "message": message, "status_code": None}
        data = {"last_error": last_error, "completion": self._completion_data()}
        self._record_event(RUN_FAILED, now, data, facts)

    def _completion_data(self) -> dict[str, Any]:
        """What a terminal event says of the completion that ended the run (no output: events
        stay small; the run shows it)."""
        return {
            "status": None if self.completion_status is None else str(self.completion_status),
            "detail": self.completion_detail,
            "completed_at": None if self.completed_at is None else format_utc(self.completed_at),
        }

    def fail_lost(
        self,
        owner: str,
        now: datetime,
        *,
        lease_expiries: int = 0,
        max_attempts: int | None = None,
        facts: ClaimFacts = NO_FACTS,
    ) -> None:
        """Give up on a run taken over from a lost worker, without another attempt (DESIGN.md
        §6): its lease expired too often (a run that takes its worker down must not take down
        every worker in turn), or, with `max_attempts`, the lost attempt was its last one.
        `lease_expiries`: how often its lease expired (counted by the claim)."""
        _aware("now", now)
        self._require_lease(owner)
        self._drop_lease()
        self._finish(RunStatus.FAILED, now)
        if max_attempts is None:
            message = f"its lease expired {lease_expiries} times; not attempted again"
        else:
            message = (
                f"its lost attempt was attempt {self.attempt_count} of max_attempts "
                f"{max_attempts}; not attempted again"
            )
        last_error = {"kind": LOST_ATTEMPT_KIND, "message": message, "status_code": None}
        self._record_event(RUN_FAILED, now, {"last_error": last_error}, facts)

    def skip(
        self,
        reason: SkipReason,
        now: datetime,
        *,
        owner: str | None = None,
        facts: ClaimFacts = NO_FACTS,
    ) -> None:
        """Stop the run without (further) attempts: a pending run whose tenant was suspended at
        scheduled_for, a planned-ahead run that overlaps (overlap_policy skip), or in-flight
        retries of a tenant that got suspended. An in_progress run needs its lease `owner`.
        A skipped run records `schedule.run.skipped` and does not count toward the breaker."""
        _aware("now", now)
        if self.status is RunStatus.IN_PROGRESS:
            if owner is None:
                raise IllegalTransition(f"run {self.id} is in_progress: only its owner may skip")
            self._require_lease(owner)
        elif self.status not in (RunStatus.PENDING, RunStatus.RETRYING):
            raise IllegalTransition(f"run {self.id} is {self.status}; cannot skip")
        self._drop_lease()
        self.skip_reason = SkipReason(reason)
        self._finish(RunStatus.SKIPPED, now)
        self._record_event(RUN_SKIPPED, now, {"skip_reason": str(self.skip_reason)}, facts)

    # ---- helpers --------------------------------------------------------------------------

    def _require_lease(self, owner: str) -> None:
        if self.status is not RunStatus.IN_PROGRESS:
            raise LeaseLost(f"run {self.id} is {self.status}, not in_progress under {owner!r}")
        if self.lease_owner != owner:
            raise LeaseLost(f"run {self.id} is leased to another worker, not {owner!r}")

    def _drop_lease(self) -> None:
        self.lease_owner = None
        self.lease_expires_at = None

    def _finish(self, status: RunStatus, now: datetime) -> None:
        self.status = status
        self.finished_at = now
        self.next_attempt_at = None

    def finish_data(self, facts: ClaimFacts = NO_FACTS, attempt_ms: int = 0) -> dict[str, Any]:
        """What every terminal event says about the run (times in UTC ISO 8601, like the
        envelope): `due_at` is when its first attempt could start (scheduled_for plus jitter),
        `first_attempt_at` when the run was first claimed for an attempt (None if it never was),
        `delivery_ms` the attempts' durations summed (the earlier ones', from `facts`, and
        `attempt_ms` of the attempt just recorded), `endpoint` the webhook's `host:port` (None
        for event actions and runs skipped before a claim)."""
        first = self.started_at if self.attempt_count else None
        return {
            "trigger": str(self.trigger),
            "status": str(self.status),
            "attempt_count": self.attempt_count,
            "due_at": format_utc(self.due),
            "first_attempt_at": None if first is None else format_utc(first),
            "finished_at": None if self.finished_at is None else format_utc(self.finished_at),
            "delivery_ms": facts.earlier_delivery_ms + attempt_ms,
            "endpoint": facts.endpoint,
        }

    def _record_event(
        self,
        type_: str,
        now: datetime,
        extra: Mapping[str, Any],
        facts: ClaimFacts = NO_FACTS,
        attempt_ms: int = 0,
    ) -> None:
        data = self.finish_data(facts, attempt_ms)
        data.update(extra)
        self.events.append(
            DomainEvent(
                # Derived from the run and the outcome: a re-run of the same write yields the same
                # id, and a run finishes once, so consumers can deduplicate on it.
                id=stable_id("evt", self.id, type_),
                type=type_,
                tenant_id=self.tenant_id,
                time=now,
                schedule_id=self.schedule_id,
                data=data,
                run_id=self.id,
                scheduled_for=self.scheduled_for,
            )
        )
