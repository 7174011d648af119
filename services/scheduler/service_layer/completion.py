"""Completion callbacks (DESIGN.md §7b "Completion"): issuing a callback-mode attempt's token,
the completion call (`POST /v1/runs/{run_id}/complete`) and the watchdog that times out runs
whose deadline passed. The run's transitions are the domain's (domain/run.py "Awaiting a
completion"); this layer reads what they need, writes what they did and applies its effects in
the same transaction: the events (outbox), the too_fast alert, the breaker, and the wake-up of
a buffer_one schedule's waiting run.

Replica safety: a completion call locks its run (FOR UPDATE) and the watchdog skips locked rows
(SKIP LOCKED), so of two watchdogs, or a watchdog and a call, exactly one ends an awaiting; the
other sees it ended (`CompletionVerdict.REPLAYED` / `CONFLICT`) or does not see it at all.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduler.domain.completion import token_matches, too_fast_alert
from scheduler.domain.events import DomainEvent
from scheduler.domain.run import (
    Attempt,
    ClaimFacts,
    CompletionReport,
    CompletionStatus,
    CompletionVerdict,
    Run,
    RunStatus,
)
from scheduler.domain.versions import Actor, Source
from scheduler.service_layer.breaker import apply_breaker
from scheduler.service_layer.dispatch_service import backoff_of
from scheduler.service_layer.errors import ServiceError
from scheduler.service_layer.run_ports import Completion, DeliverySpec
from scheduler.service_layer.unit_of_work import UnitOfWork, UnitOfWorkFactory
from servicekit.runtime.worker import WorkerLoop
from webhookdeliver import endpoint_key

log = logging.getLogger("scheduler.completion")
Clock = Callable[[], datetime]
WATCHDOG_BATCH = 100
"""Overdue runs one watchdog transaction times out (a busy step goes again at once)."""


class CompletionRefused(ServiceError):
    """Base of a refused completion call; the API maps each subclass to its status."""


class CompletionUnauthorized(CompletionRefused):
    """No run, or not the token of its current attempt (401; the same for both, so a caller
    without the token learns nothing of the run)."""

    def __init__(self) -> None:
        super().__init__("the token is not valid for this run")


class CompletionConflict(CompletionRefused):
    """The attempt already ended otherwise (409)."""

    def __init__(self, ended: CompletionStatus | None) -> None:
        how = "was not accepted or no longer awaits a completion" if ended is None else ended
        super().__init__(f"this run's attempt already ended: {how}")
        self.ended = ended


class CompletionTooEarly(CompletionRefused):
    """The call came before the worker wrote the attempt's acceptance (503, Retry-After)."""

    RETRY_AFTER_SECONDS = 1

    def __init__(self) -> None:
        super().__init__("the attempt's acceptance is still being recorded; call again shortly")


@dataclass(frozen=True)
class CompletionResult:
    run: Run
    verdict: CompletionVerdict


async def complete_run(
    uows: UnitOfWorkFactory,
    run_id: str,
    token: str,
    report: CompletionReport,
    now: datetime,
    rng: random.Random | None = None,
) -> CompletionResult:
    """The completion call. Raises CompletionUnauthorized, CompletionConflict or
    CompletionTooEarly; a replay of the call that ended the attempt changes nothing."""
    async with uows(Actor.system(Source.BREAKER)) as uow:
        run = await uow.runs.lock_for_completion(run_id)
        if run is None or not token_matches(run, token):
            raise CompletionUnauthorized
        specs = await uow.runs.delivery_specs([run.schedule_id], now)
        spec = specs.get(run.schedule_id)
        attempt = (await uow.runs.last_attempts_of([run.id])).get(run.id)
        verdict = run.complete(
            report,
            now,
            attempt_started_at=now if attempt is None else attempt.started_at,
            next_delay_seconds=_retry_delay(run, spec, now, rng),
            min_duration_seconds=None if spec is None else spec.completion.min_duration_seconds,
            facts=await _facts(uow, run, spec),
        )
        if verdict is CompletionVerdict.CONFLICT:
            raise CompletionConflict(run.completion_status)
        if verdict is CompletionVerdict.EARLY:
            raise CompletionTooEarly
        if verdict is CompletionVerdict.APPLIED:
            await _write_ended(uow, [(run, spec, attempt)], now)
            await uow.commit()
    return CompletionResult(run, verdict)


async def time_out_overdue(
    uows: UnitOfWorkFactory,
    now: datetime,
    rng: random.Random | None = None,
    limit: int = WATCHDOG_BATCH,
) -> int:
    """One watchdog pass: every awaiting run whose deadline is <= now (up to `limit`) gets a
    failed attempt, `completion_timeout`, retried by its policy. Returns how many."""
    async with uows(Actor.system(Source.BREAKER)) as uow:
        overdue = await uow.runs.lock_overdue_awaiting(now, limit)
        if not overdue:
            return 0
        specs = await uow.runs.delivery_specs(sorted({r.schedule_id for r in overdue}), now)
        attempts = await uow.runs.last_attempts_of([r.id for r in overdue])
        spent = await uow.runs.delivery_ms_of([r.id for r in overdue])
        ended: list[tuple[Run, DeliverySpec | None, Attempt | None]] = []
        for run in overdue:
            spec = specs.get(run.schedule_id)
            facts = ClaimFacts(_endpoint(spec), spent.get(run.id, 0))
            if run.time_out(now, _retry_delay(run, spec, now, rng), facts):
                ended.append((run, spec, attempts.get(run.id)))
        await _write_ended(uow, ended, now)
        await uow.commit()
    for run, _, _ in ended:
        log.info(
            "run %s of schedule %s: completion_timeout, %s", run.id, run.schedule_id, run.status
        )
    return len(ended)


async def _write_ended(
    uow: UnitOfWork,
    ended: Sequence[tuple[Run, DeliverySpec | None, Attempt | None]],
    now: datetime,
) -> None:
    """Store ended awaitings with their events, the too_fast alerts, the breaker and the
    wake-up of waiting runs, in the caller's transaction."""
    if not ended:
        return
    await uow.runs.write_completion_ends([run for run, _, _ in ended])
    finished: list[Completion] = []
    for run, spec, attempt in ended:
        for event in run.events:
            uow.add_event(event)
        run.events.clear()
        if run.too_fast and spec is not None:
            uow.add_event(_alert(run, spec, attempt, now))
        if run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED):
            finished.append(Completion(run, "", _ended_attempts(run, attempt)))
        run.attempt_updates.clear()
    await apply_breaker(uow, finished, now)
    if finished:
        await uow.runs.wake_waiting(sorted({c.run.schedule_id for c in finished}), now)


def _ended_attempts(run: Run, attempt: Attempt | None) -> list[Attempt]:
    """The attempt as the end left it (the breaker's alert quotes its error)."""
    if attempt is None or not run.attempt_updates:
        return []
    u = run.attempt_updates[-1]
    return [
        Attempt(
            run_id=attempt.run_id,
            number=attempt.number,
            started_at=attempt.started_at,
            duration_ms=attempt.duration_ms,
            status_code=attempt.status_code,
            error_kind=u.error_kind or attempt.error_kind,
            error_message=u.error_message or attempt.error_message,
            response_excerpt=attempt.response_excerpt,
            completed_at=u.completed_at,
            completion_detail=u.detail,
            completion_output=u.output,
        )
    ]


def _alert(run: Run, spec: DeliverySpec, attempt: Attempt | None, now: datetime) -> DomainEvent:
    started = now if attempt is None else attempt.started_at
    least = spec.completion.min_duration_seconds or 0
    duration = ((run.completed_at or now) - started).total_seconds()
    return too_fast_alert(
        run, spec.name, min_duration_seconds=least, duration_seconds=duration, now=now
    )


def _retry_delay(
    run: Run, spec: DeliverySpec | None, now: datetime, rng: random.Random | None
) -> float | None:
    """Seconds until the attempt after the one that awaited (its number is `attempt_count`),
    or None when the retry policy is used up (DESIGN §6: a failed completion is retried like
    any failed attempt)."""
    if spec is None:
        return None
    backoff = backoff_of(spec)
    first = run.started_at or now
    elapsed = max((now - first).total_seconds(), 0.0)
    return backoff.next_delay(run.attempt_count, elapsed, rng=rng or random.Random())


def _endpoint(spec: DeliverySpec | None) -> str | None:
    return None if spec is None or spec.target is None else endpoint_key(spec.target.url)


async def _facts(uow: UnitOfWork, run: Run, spec: DeliverySpec | None) -> ClaimFacts:
    spent = await uow.runs.delivery_ms_of([run.id])
    return ClaimFacts(_endpoint(spec), spent.get(run.id, 0))


class CompletionWatchdog:
    """The worker's loop over `time_out_overdue`: a pass every `interval_seconds` (the exactness
    of a timeout), at once again while a pass was full. Safe on every worker replica."""

    def __init__(
        self,
        uows: UnitOfWorkFactory,
        clock: Clock,
        *,
        interval_seconds: float = 1.0,
        rng: random.Random | None = None,
        on_timed_out: Callable[[int], None] | None = None,
    ) -> None:
        self.uows = uows
        self.clock = clock
        self.rng = rng or random.Random()
        self.on_timed_out = on_timed_out
        self.loop = WorkerLoop(
            "completion-watchdog",
            self.step,
            idle_seconds=interval_seconds,
            outage="database unavailable",
            logger=log,
        )

    async def step(self) -> float | None:
        """One pass; 0 (go again) when it was full, None (wait the interval) otherwise."""
        count = await time_out_overdue(self.uows, self.clock(), self.rng)
        if count and self.on_timed_out is not None:
            self.on_timed_out(count)
        return 0.0 if count >= WATCHDOG_BATCH else None
