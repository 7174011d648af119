"""LeasedPipeline against a fake store (in memory, gated attempts) and a manual clock: leases and
owner tokens, slots per key inside the global cap, decided completions, the batched writer with
lost leases and outages, lease extension, the refill rule, the continuous loop and `stop()`."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from servicekit.runtime.pipeline import (
    MIN_IDLE_SECONDS,
    Lease,
    LeasedPipeline,
    PipelineSettings,
    Released,
    random_owner,
)

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass(frozen=True)
class Done:
    item: str
    owner: str
    outcome: str


@dataclass
class Item:
    id: str
    key: str = "a:80"
    skip: bool = False
    fail: bool = False
    """The attempt raises (a bug): the item is let go, nothing is written."""


@dataclass
class FakeStore:
    """Items due in order; attempts wait on `gate` (when set) and record concurrency."""

    clock: Clock
    due: list[Item] = field(default_factory=list)
    gate: asyncio.Event | None = None
    acquired: list[tuple[str, datetime, int, list[str]]] = field(default_factory=list)
    written: list[list[Done]] = field(default_factory=list)
    lost_ids: set[str] = field(default_factory=set)
    write_errors: list[Exception] = field(default_factory=list)
    extended: list[tuple[list[tuple[str, str]], datetime]] = field(default_factory=list)
    released: list[tuple[str, str]] = field(default_factory=list)
    next_due: datetime | None = None
    in_flight: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    peak_total: int = 0
    acquire_gate: asyncio.Event | None = None
    acquire_entered: asyncio.Event = field(default_factory=asyncio.Event)

    async def acquire(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[Lease[Item, Done]]:
        self.acquire_entered.set()
        if self.acquire_gate is not None:
            await self.acquire_gate.wait()
        taken, self.due = self.due[:limit], self.due[limit:]
        self.acquired.append((owner, lease_until, limit, [i.id for i in taken]))
        return [
            Lease.decided(i.id, i, Done(i.id, owner, "skipped"))
            if i.skip
            else Lease.attempt(i.id, i, i.key)
            for i in taken
        ]

    async def attempt(self, item: Item, owner: str) -> Done:
        """The pipeline's attempt function (the store's test double plays both parts)."""
        self.in_flight[item.key] = self.in_flight.get(item.key, 0) + 1
        self.peak[item.key] = max(self.peak.get(item.key, 0), self.in_flight[item.key])
        self.peak_total = max(self.peak_total, sum(self.in_flight.values()))
        try:
            if self.gate is not None:
                await self.gate.wait()
            else:
                await asyncio.sleep(0)
            if item.fail:
                raise RuntimeError("bug")
            return Done(item.id, owner, "ok")
        finally:
            self.in_flight[item.key] -= 1

    async def write(self, completions: Sequence[Done]) -> set[str]:
        if self.write_errors:
            raise self.write_errors.pop(0)
        self.written.append(list(completions))
        return {c.item for c in completions} & self.lost_ids

    async def extend(self, leases: Sequence[tuple[str, str]], until: datetime) -> int:
        self.extended.append((list(leases), until))
        return len(leases)

    def release(self, lease: Lease[Item, Done], owner: str, now: datetime) -> Done | None:
        self.released.append((lease.id, owner))
        return Done(lease.id, owner, "released")

    async def next_due_at(self) -> datetime | None:
        return self.next_due

    def outcomes(self) -> dict[str, str]:
        return {d.item: d.outcome for batch in self.written for d in batch}


def make(
    store: FakeStore, **settings: object
) -> tuple[LeasedPipeline[Item, Done], list[tuple[int, int]]]:
    written: list[tuple[int, int]] = []
    owners = iter(range(1, 1_000))
    pipeline: LeasedPipeline[Item, Done] = LeasedPipeline(
        store,
        store.attempt,
        store.clock,
        settings=PipelineSettings(**settings),  # type: ignore[arg-type]
        new_owner=lambda now: f"w:{next(owners)}",
        name="test",
        on_written=lambda n, lost: written.append((n, lost)),
    )
    return pipeline, written


def items(n: int, prefix: str = "i", **kwargs: object) -> list[Item]:
    return [Item(f"{prefix}{k:03d}", **kwargs) for k in range(n)]  # type: ignore[arg-type]


async def written_until(p: LeasedPipeline[Item, Done], store: FakeStore, n: int) -> None:
    """Write what finishes until `n` results are written (the attempts still in flight stay)."""
    for _ in range(2_000):
        await p.write_once()
        if len(store.outcomes()) >= n:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"fewer than {n} written")


async def until(cond: object, what: str) -> None:
    for _ in range(2_000):
        if cond():  # type: ignore[operator]
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"timed out waiting for {what}")


# ---- settings ---------------------------------------------------------------------------------


def test_held_limit_and_refill_room() -> None:
    s = PipelineSettings(concurrency=64, claim_batch=100)
    assert (s.held_limit, s.refill_room) == (256, 50)  # half a batch: 192 held beyond the slots
    assert PipelineSettings(concurrency=4, max_claimed=50, claim_batch=10).refill_room == 5
    assert PipelineSettings(concurrency=8, max_claimed=8).refill_room == 1  # at least one
    with pytest.raises(ValueError, match="concurrency"):
        PipelineSettings(concurrency=0)
    with pytest.raises(ValueError, match="lease_seconds"):
        PipelineSettings(lease_seconds=0)


def test_a_lease_is_attempted_unless_its_completion_was_decided() -> None:
    assert Lease[str, str].attempt("x", "x", "k").done is None
    assert Lease[str, str].decided("x", "x", "c").done == "c"


# ---- step by step -----------------------------------------------------------------------------


async def test_pump_leases_under_a_fresh_owner_and_drain_writes_every_result() -> None:
    clock = Clock()
    store = FakeStore(clock, due=items(5))
    p, written = make(store, concurrency=2, max_claimed=4, claim_batch=3, lease_seconds=30)
    assert await p.pump() == (3, 3)  # room 4, batch 3
    assert p.held == 3
    assert await p.pump() == (1, 1)  # the room left
    assert await p.pump() == (0, 0)  # full: not even asked
    (o1, until1, _, ids1), (o2, _, _, ids2) = store.acquired
    assert (o1, o2, until1) == ("w:1", "w:2", T0 + timedelta(seconds=30))
    await p.drain()
    assert p.held == 0
    assert store.outcomes() == dict.fromkeys(ids1 + ids2, "ok")
    assert {d.owner for b in store.written for d in b if d.item in ids2} == {"w:2"}
    assert sum(n for n, _ in written) == 4
    assert await p.pump() == (1, 3)  # the last one; asked for a whole batch again


async def test_a_completion_decided_at_claim_goes_to_the_writer_without_a_slot() -> None:
    clock = Clock()
    gate = asyncio.Event()
    store = FakeStore(clock, due=[Item("skip", skip=True), Item("slow")], gate=gate)
    p, _ = make(store, concurrency=1)
    await p.pump()
    assert await p.write_once() == 1  # the skip, while the attempt still waits on the gate
    assert store.outcomes() == {"skip": "skipped"}
    assert p.held == 1
    gate.set()
    await p.drain()
    assert store.outcomes() == {"skip": "skipped", "slow": "ok"}


async def test_slots_per_key_inside_the_global_cap_and_a_hanging_key_stalls_only_itself() -> None:
    clock = Clock()
    hang = asyncio.Event()
    store = FakeStore(clock, due=items(6, "h", key="hang:80"))
    p, _ = make(store, concurrency=4, per_key_limit=2, max_claimed=50, claim_batch=50)
    store.gate = hang
    await p.pump()  # six attempts on the hanging key
    await until(lambda: store.in_flight.get("hang:80") == 2, "two hanging attempts")
    store.gate = None
    store.due = items(20, "f", key="fast:80")
    await p.pump()
    # The other two global slots serve every fast attempt while the hanging key keeps its two.
    await written_until(p, store, 20)
    assert set(store.outcomes()) == {f"f{k:03d}" for k in range(20)}
    assert store.peak["hang:80"] == 2
    assert store.peak_total <= 4
    hang.set()
    await p.drain()
    assert len(store.outcomes()) == 26
    assert store.peak["hang:80"] == 2


async def test_lost_leases_are_counted_and_reported() -> None:
    clock = Clock()
    store = FakeStore(clock, due=items(3), lost_ids={"i001"})
    p, written = make(store)
    await p.pump()
    await p.drain()
    assert written == [(2, 1)]
    assert (p.written, p.dropped) == (2, 1)
    assert p.held == 0


async def test_a_transient_write_error_keeps_the_batch_and_any_other_drops_it() -> None:
    clock = Clock()
    store = FakeStore(clock, due=items(2), write_errors=[sqlite3.OperationalError("locked")])
    p, written = make(store)
    await p.pump()
    await asyncio.sleep(0.001)
    with pytest.raises(sqlite3.OperationalError):
        await p.drain()
    assert p.held == 2  # kept, not written
    await p.drain()  # the same batch, written this time
    assert [[d.item for d in b] for b in store.written] == [["i000", "i001"]]
    store.due = items(2, "j")
    store.write_errors = [ValueError("constraint")]
    await p.pump()
    await p.drain()  # dropped: the leases expire and the items are redone elsewhere
    assert p.held == 0
    assert len(store.written) == 1
    assert written == [(2, 0)]


async def test_an_attempt_that_raises_lets_the_item_go() -> None:
    clock = Clock()
    store = FakeStore(clock, due=[Item("bug", fail=True), Item("fine")])
    p, _ = make(store)
    await p.pump()
    await p.drain()
    assert store.outcomes() == {"fine": "ok"}
    assert p.held == 0
    assert await p.extend_leases_once() == 0  # its lease is no longer extended


async def test_extend_renews_every_held_lease_to_now_plus_the_lease() -> None:
    clock = Clock()
    gate = asyncio.Event()
    store = FakeStore(clock, due=items(3), gate=gate)
    p, _ = make(store, claim_batch=2, lease_seconds=12)
    await p.pump()
    await p.pump()
    clock.advance(5)
    assert await p.extend_leases_once() == 3
    ((leases, until_at),) = store.extended
    assert sorted(leases) == [("i000", "w:1"), ("i001", "w:1"), ("i002", "w:2")]
    assert until_at == T0 + timedelta(seconds=17)
    gate.set()
    await p.drain()
    assert await p.extend_leases_once() == 0
    assert len(store.extended) == 1  # nothing held: no store call


async def test_an_old_owners_completion_is_dropped_and_keeps_the_newer_lease() -> None:
    clock = Clock()
    gate = asyncio.Event()
    store = FakeStore(clock, due=[Item("x")], gate=gate)
    p, written = make(store)
    await p.pump()  # w:1 holds x, its attempt hangs
    await until(lambda: store.in_flight.get("a:80") == 1, "w:1's attempt")
    later = store.gate = asyncio.Event()
    store.due = [Item("x")]
    await p.pump()  # the lease expired meanwhile and this worker claimed x again (w:2)
    await until(lambda: store.in_flight.get("a:80") == 2, "w:2's attempt")
    gate.set()  # w:1's attempt ends first: its result is lost, never sent to the store
    await until(lambda: store.in_flight.get("a:80") == 1, "w:1's attempt ended")
    await p.write_once()
    assert store.written == []
    assert written == [(0, 1)]
    assert p.held == 1  # w:2 still holds x: its lease is still extended
    assert await p.extend_leases_once() == 1
    assert store.extended[-1][0] == [("x", "w:2")]
    later.set()
    await p.drain()
    assert [d.owner for b in store.written for d in b] == ["w:2"]
    assert p.held == 0


async def test_a_batch_never_holds_an_item_twice() -> None:
    """Both leases' completions wait in one batch (the writer was held up): only the newer
    lease's reaches the store, which could otherwise see the item twice in one write (the
    scheduler's settle inserted both attempts and events; notification's broke its unique
    attempt number and failed the whole batch)."""
    clock = Clock()
    first, second = asyncio.Event(), asyncio.Event()
    store = FakeStore(clock, due=[Item("x")], gate=first)
    p, written = make(store)
    await p.pump()
    await until(lambda: store.in_flight.get("a:80") == 1, "w:1's attempt")
    store.gate, store.due = second, [Item("x")]
    await p.pump()
    await until(lambda: store.in_flight.get("a:80") == 2, "w:2's attempt")
    first.set()
    second.set()
    await until(lambda: store.in_flight.get("a:80") == 0, "both attempts ended")
    await p.drain()
    assert [[d.owner for d in b] for b in store.written] == [["w:2"]]
    assert written == [(1, 1)]
    assert (p.written, p.dropped, p.held) == (1, 1, 0)


async def test_claim_step_refill_rule_and_waits() -> None:
    clock = Clock()
    gate = asyncio.Event()
    store = FakeStore(clock, due=items(7), gate=gate)
    p, _ = make(store, concurrency=4, max_claimed=8, claim_batch=4, idle_poll_seconds=1.0)
    assert p.settings.refill_room == 2
    assert await p._claim_step() == 0.0  # a full batch: more is probably due
    assert await p._claim_step() == 1.0  # 3 of 4: nothing more due (no next due time known)
    assert p.held == 7
    store.due = items(5, "more")
    assert await p._claim_step() == 1.0  # room for 1 < refill room: wait for a write
    assert len(store.acquired) == 2
    gate.set()
    await p.drain()
    store.due = items(1, "z")
    store.next_due = T0 + timedelta(seconds=0.25)
    assert await p._claim_step() == 0.25  # fewer than asked: sleep until the next due time
    store.next_due = T0 - timedelta(seconds=5)
    assert await p._claim_step() == MIN_IDLE_SECONDS  # due but none got (locked): no spin
    store.next_due = None
    assert await p._claim_step() == 1.0


async def test_attempted_items_waiting_for_the_writer_do_not_hold_up_claims_within_a_bound() -> (
    None
):
    clock = Clock()
    store = FakeStore(clock, due=items(40))
    p, _ = make(store, concurrency=4, max_claimed=8, claim_batch=8, write_batch=10)
    assert await p.pump() == (8, 8)
    await until(lambda: p._attempting == 0, "the first 8 attempted")  # nothing written yet
    assert await p.pump() == (8, 8)  # attempted, unwritten items leave the claim its room
    await until(lambda: p._attempting == 0, "the next 8 attempted")
    # 16 held, none written: the bound is held_limit + write_batch = 18 in all.
    assert await p.pump() == (2, 2)
    assert p.held == 18
    await until(lambda: p._attempting == 0, "the last 2 attempted")
    assert await p.pump() == (0, 0)  # full until the writer catches up
    await p.write_once()  # one batch of 10 written
    assert p.held == 8
    assert await p.pump() == (8, 8)
    await p.drain()
    assert p.held == 0


# ---- the continuous loop -----------------------------------------------------------------------


async def test_run_delivers_continuously_wakes_up_and_stops_cleanly() -> None:
    clock = Clock()
    store = FakeStore(clock, due=items(50))
    p, written = make(store, concurrency=4, claim_batch=8, idle_poll_seconds=5.0)
    task = asyncio.create_task(p.run())
    await until(lambda: len(store.outcomes()) == 50, "the first 50")
    store.due = items(3, "late")
    p.wake()  # ends the 5 s idle wait at once
    await until(lambda: len(store.outcomes()) == 53, "the woken three")
    await p.stop(grace_seconds=1.0)
    await asyncio.wait_for(task, 1.0)
    assert sum(n for n, _ in written) == 53
    assert all(limit <= 8 for _, _, limit, _ in store.acquired)


async def test_stop_finishes_within_the_grace_releases_the_rest_and_flushes() -> None:
    clock = Clock()
    gate = asyncio.Event()
    store = FakeStore(clock, due=[Item("quick")])
    p, _ = make(store, concurrency=4, idle_poll_seconds=5.0)
    task = asyncio.create_task(p.run())
    await until(lambda: "quick" in store.outcomes(), "the quick one")
    store.due = items(2, "hang")
    store.gate = gate
    p.wake()
    await until(lambda: store.in_flight.get("a:80") == 2, "two hanging attempts")
    await p.stop(grace_seconds=0.01)
    await asyncio.wait_for(task, 1.0)
    assert store.outcomes()["quick"] == "ok"
    assert store.outcomes()["hang000"] == store.outcomes()["hang001"] == "released"
    assert sorted(i for i, _ in store.released) == ["hang000", "hang001"]
    assert p.held == 0


async def test_stop_lets_a_claim_under_way_land_then_releases_its_items() -> None:
    clock = Clock()
    store = FakeStore(clock, due=items(2), gate=asyncio.Event())
    store.acquire_gate = asyncio.Event()
    p, _ = make(store, idle_poll_seconds=5.0)
    task = asyncio.create_task(p.run())
    await asyncio.wait_for(store.acquire_entered.wait(), 1.0)  # the claim waits on the store
    stopping = asyncio.create_task(p.stop(grace_seconds=1.0))
    await asyncio.sleep(0.001)
    store.acquire_gate.set()  # the claim returns after stop() began
    await asyncio.wait_for(stopping, 2.0)
    await asyncio.wait_for(task, 1.0)
    assert store.outcomes() == {"i000": "released", "i001": "released"}
    assert store.peak_total == 0  # handed back unattempted, not attempted then cancelled
    assert p.held == 0


async def test_a_claim_landing_after_the_grace_starts_no_attempt() -> None:
    clock = Clock()
    store = FakeStore(clock, due=items(2))
    store.acquire_gate = asyncio.Event()
    p, _ = make(store, idle_poll_seconds=5.0)
    task = asyncio.create_task(p.run())
    await asyncio.wait_for(store.acquire_entered.wait(), 1.0)
    await asyncio.wait_for(p.stop(grace_seconds=0.01), 2.0)  # gives up on the claim
    store.acquire_gate.set()  # the claim lands once nothing writes any more
    await asyncio.wait_for(task, 1.0)
    for _ in range(5):
        await asyncio.sleep(0)
    # No request is sent whose result could never be written (it would be sent again once
    # the lease expires): the items are handed back unattempted.
    assert store.peak_total == 0
    assert [i for i, _ in store.released] == ["i000", "i001"]


async def test_cancelling_run_cancels_the_attempts_in_flight() -> None:
    clock = Clock()
    store = FakeStore(clock, due=items(2), gate=asyncio.Event())
    p, _ = make(store, idle_poll_seconds=5.0)
    task = asyncio.create_task(p.run())
    await until(lambda: sum(store.in_flight.values()) == 2, "two attempts in flight")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sum(store.in_flight.values()) == 0  # ended with run(), none left running alone


def test_settings_refuse_a_zero_idle_wait_and_bad_backoff() -> None:
    with pytest.raises(ValueError, match="idle_poll_seconds"):
        PipelineSettings(idle_poll_seconds=0)
    with pytest.raises(ValueError, match="retry_initial_seconds"):
        PipelineSettings(retry_initial_seconds=2.0, retry_max_seconds=1.0)


async def test_stop_without_run_flushes_what_is_queued() -> None:
    clock = Clock()
    store = FakeStore(clock, due=items(3))
    p, _ = make(store)
    await p.pump()
    await asyncio.sleep(0.001)
    await p.stop(grace_seconds=0.5)
    assert store.outcomes() == dict.fromkeys(["i000", "i001", "i002"], "ok")
    assert await p.pump() == (0, 0)  # stopped: no more claims


async def test_the_lease_loop_extends_while_attempts_run() -> None:
    clock = Clock()
    gate = asyncio.Event()
    store = FakeStore(clock, due=items(2), gate=gate)
    p, _ = make(store, lease_seconds=0.015, idle_poll_seconds=5.0)
    task = asyncio.create_task(p.run())
    await until(lambda: len(store.extended) >= 2, "two extensions (every lease / 3)")
    assert {lease for leases, _ in store.extended for lease in leases} == {
        ("i000", "w:1"),
        ("i001", "w:1"),
    }
    gate.set()
    await until(lambda: len(store.outcomes()) == 2, "both written")
    await p.stop(grace_seconds=0.1)
    await asyncio.wait_for(task, 1.0)


async def test_the_writer_retries_an_outage_with_backoff_and_keeps_the_batch() -> None:
    clock = Clock()
    store = FakeStore(
        clock,
        due=items(4),
        write_errors=[sqlite3.OperationalError("down"), sqlite3.OperationalError("down")],
    )
    p, written = make(store, retry_initial_seconds=0.001, retry_max_seconds=0.002)
    task = asyncio.create_task(p.run())
    await until(lambda: len(store.outcomes()) == 4, "written after the outage")
    await p.stop(grace_seconds=0.1)
    await asyncio.wait_for(task, 1.0)
    assert sum(n for n, _ in written) == 4
    assert not store.write_errors


class ReleasingStore:
    """A store whose release hands `Released` to its write (as notification's are)."""

    def __init__(self, fake: FakeStore) -> None:
        self.fake = fake
        self.released: list[Released] = []

    async def acquire(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[Lease[Item, Done | Released]]:
        return list(await self.fake.acquire(owner, now, lease_until, limit))  # type: ignore[arg-type]

    async def write(self, completions: Sequence[Done | Released]) -> set[str]:
        self.released += [c for c in completions if isinstance(c, Released)]
        return await self.fake.write([c for c in completions if isinstance(c, Done)])

    async def extend(self, leases: Sequence[tuple[str, str]], until: datetime) -> int:
        return await self.fake.extend(leases, until)

    def release(self, lease: Lease[Item, Done | Released], owner: str, now: datetime) -> Released:
        return Released(lease.id, owner)

    async def next_due_at(self) -> datetime | None:
        return None


async def test_a_worker_owns_its_pipeline_with_a_store_and_an_attempt() -> None:
    clock = Clock()
    gate = asyncio.Event()
    fake = FakeStore(clock, due=items(3), lost_ids={"i001"})
    store = ReleasingStore(fake)
    pipeline: LeasedPipeline[Item, Done | Released] = LeasedPipeline(
        store, fake.attempt, clock, new_owner=random_owner("wrk_test")
    )
    assert await pipeline.pump() == (3, 100)
    await pipeline.drain()
    assert (pipeline.held, pipeline.written, pipeline.dropped) == (0, 2, 1)
    fake.gate = gate
    fake.due = [Item("stuck")]
    task = asyncio.create_task(pipeline.run())
    await until(lambda: fake.in_flight.get("a:80") == 1, "the stuck attempt")
    await pipeline.stop(grace_seconds=0.01)
    await asyncio.wait_for(task, 1.0)
    [released] = store.released
    assert released.id == "stuck"
    assert released.owner.startswith("wrk_test:")
