"""Settling: write a group of finished attempts (and releases, and claim-time skips) in ONE
unit of work (DESIGN.md §6, §10: batched completion writes).

For each completion still held under its lease (`runs.settle_leased`, a compare-and-set on the
lease; a lost lease drops the write, the new holder's result stands): the run's new state, its
attempt rows, its events (outbox); on PostgreSQL one statement for all of them, including the
breaker's all-succeeded reset. Then the breaker for schedules with a failed run in the group
(service_layer/breaker.py), in the same transaction as the runs that moved it; and the waiting
run of a buffer_one schedule whose run finished is made due now (`wake_waiting`), and so is a
run parked to wait in this group whose predecessor is no longer unfinished. A callback-mode run
accepted in this group gets its completion deadline (`mark_awaiting`) in the same transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduler.domain.run import Run, RunStatus
from scheduler.domain.versions import Actor, Source
from scheduler.service_layer.breaker import apply_breaker
from scheduler.service_layer.run_ports import Completion
from scheduler.service_layer.unit_of_work import UnitOfWork, UnitOfWorkFactory

__all__ = ["Completion", "SettleReport", "settle_completions"]

_FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED)


@dataclass(frozen=True)
class SettleReport:
    settled: list[str]
    lost: list[str]
    """Runs whose lease was taken over: their write was dropped."""
    paused: list[str]
    """Schedules the breaker paused."""


async def settle_completions(
    uows: UnitOfWorkFactory,
    completions: Sequence[Completion],
    now: datetime,
    *,
    before_commit: Callable[[UnitOfWork, list[str]], Awaitable[object]] | None = None,
) -> SettleReport:
    """`before_commit(uow, written ids)`: more writes in the settle's transaction (flow
    control makes runs waiting for the slots these free due at once, in the same commit)."""
    if not completions:
        return SettleReport([], [], [])
    async with uows(Actor.system(Source.BREAKER)) as uow:
        owned = await uow.runs.settle_leased(completions)
        kept = [c for c in completions if c.run.id in owned]
        await _mark_awaiting(uow, kept)
        lost = [c.run.id for c in completions if c.run.id not in owned]
        failing = {c.run.schedule_id for c in kept if c.run.status is RunStatus.FAILED}
        finished = [c for c in kept if c.run.schedule_id in failing and c.run.status in _FINISHED]
        paused = await apply_breaker(uow, finished, now)
        # buffer_one: a finished run lets its schedule's waiting run start now (one statement,
        # only when such runs finished in this group).
        done = [c.run for c in kept if c.wakes_waiting and c.run.status.is_terminal]
        freed = [r.schedule_id for r in done]
        # A run parked to wait (pending, due again later) whose predecessor finished between its
        # claim and this write, when that wake-up could not see it: due now as well. The
        # predecessors are locked (PostgreSQL: FOR SHARE), so one settling concurrently is
        # waited for and re-read: its wake-up ran before our park was visible to it.
        parked = [c.run for c in kept if _parked(c.run, now)]
        if parked:
            earlier = await uow.runs.earlier_unfinished(parked, lock=True)
            freed += [r.schedule_id for r in parked if not earlier.get(r.id)]
        if freed:
            await uow.runs.wake_waiting(freed, now)
        if before_commit is not None:
            await before_commit(uow, [c.run.id for c in kept])
        await uow.commit()
    return SettleReport([c.run.id for c in kept], lost, paused)


async def _mark_awaiting(uow: UnitOfWork, kept: Sequence[Completion]) -> None:
    """Callback mode: the accepted runs' completion deadlines, with the write that accepted
    them (domain/run.py "Awaiting a completion")."""
    awaiting = [c.run for c in kept if c.run.awaiting]
    if awaiting:
        await uow.runs.mark_awaiting(awaiting)


def _parked(run: Run, now: datetime) -> bool:
    # Only `Run.wait` leaves a run pending and due later (a release leaves it due now).
    return (
        run.status is RunStatus.PENDING
        and run.next_attempt_at is not None
        and run.next_attempt_at > now
    )
