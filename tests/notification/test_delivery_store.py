"""`SqlDeliveryStore` on both dialects (PostgreSQL: the asyncpg statements of delivery_pg.py):
what a claim returns, a completion whose lease was taken over is dropped with its attempt and
its streak change, the streaks a batch writes, and every column a batch writes."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from notification.adapters import delivery_pg
from notification.adapters.delivery_store import SqlDeliveryStore
from notification.adapters.tables import delivery_attempts, subscriptions, webhook_deliveries
from notification.bootstrap import Container, bootstrap
from notification.domain.deliveries import EndpointHealth
from notification.service_layer.ports import DeliveryCompletion, SubscriptionRecord
from servicekit.data.database import asyncpg_connection
from tests.notification.conftest import make_settings
from tests.notification.replica_fault import create_endpoints, insert_due_deliveries
from tests.support.pg import explain_generic
from webhookdeliver import AttemptRecord

T0 = datetime(2030, 1, 1, tzinfo=UTC)


@dataclass
class Setup:
    c: Container
    store: SqlDeliveryStore
    subs: list[SubscriptionRecord]
    ids: list[str]


@pytest.fixture
async def setup(db_url: str, tmp_path: Path) -> AsyncIterator[Setup]:
    settings = make_settings(tmp_path, db_url)
    subs = await create_endpoints(settings, "http://127.0.0.1:9/hook", 3)
    ids = await insert_due_deliveries(settings, subs, 6)  # delivery i is for subs[i % 3]
    c = bootstrap(settings)
    try:
        yield Setup(c, SqlDeliveryStore(c.engine), subs, ids)
    finally:
        await c.aclose()


def completion(
    delivery_id: str, sub_id: str, owner: str, ok: bool, started_at: datetime, number: int = 1
) -> DeliveryCompletion:
    return DeliveryCompletion(
        delivery_id=delivery_id,
        subscription_id=sub_id,
        owner=owner,
        attempt=AttemptRecord(
            number=number,
            started_at=started_at,
            duration_ms=5,
            status_code=200 if ok else 500,
            error_kind=None if ok else "http_status",
            error_message=None if ok else "HTTP 500",
            response_excerpt="ok" if ok else "boom",
        ),
        ok=ok,
        status="succeeded" if ok else "retrying",
        next_attempt_at=None if ok else started_at + timedelta(seconds=30),
        round_started_at=started_at,
        last_error=None if ok else "http_status: HTTP 500",
    )


async def streaks(s: Setup) -> dict[str, tuple[datetime | None, int]]:
    q = sa.select(
        subscriptions.c.id, subscriptions.c.failing_since, subscriptions.c.consecutive_failures
    )
    async with s.c.engine.connect() as conn:
        return {r.id: (r.failing_since, r.consecutive_failures) for r in await conn.execute(q)}


async def test_claim_returns_each_delivery_with_its_subscription(setup: Setup) -> None:
    s = setup
    now = datetime.now(UTC)
    claimed = await s.store.acquire_due_deliveries("own_a", now, now + timedelta(minutes=1), 10)
    assert sorted(c.id for c in claimed) == s.ids
    by_sub = {sub.id: sub for sub in s.subs}
    for c in claimed:
        i = s.ids.index(c.id)
        assert c.subscription == by_sub[s.subs[i % 3].id]
        assert c.subscription.event_types == ["schedule.*"]
        assert c.tenant_id == s.subs[i % 3].tenant_id
        assert c.body == b'{"type": "schedule.triggered", "data": {"i": %d}}' % i
        assert isinstance(c.body, bytes)
        assert (c.event_type, c.attempt_count, c.round_attempts) == ("schedule.triggered", 0, 0)
        assert c.round_started_at is None
    # Leased: a second claim before the lease ends finds nothing.
    assert await s.store.acquire_due_deliveries("own_b", now, now + timedelta(minutes=1), 10) == []


async def test_a_completion_whose_lease_was_taken_over_is_dropped(setup: Setup) -> None:
    s = setup
    now = datetime.now(UTC)
    mine = await s.store.acquire_due_deliveries("own_a", now, now + timedelta(seconds=5), 10)
    later = now + timedelta(seconds=10)  # A's leases ran out; B claims one of them
    [taken] = await s.store.acquire_due_deliveries("own_b", later, later + timedelta(seconds=5), 1)
    # B counted A's attempt as lost: recorded, and B's own attempt is the next one.
    assert (taken.lost_attempt, taken.attempt_count, taken.round_attempts) == (True, 1, 1)
    assert not any(c.lost_attempt for c in mine)

    # A's late results: all failed. The taken-over one is not written, nor its attempt, nor
    # its failure counted on its endpoint (its endpoint has no other delivery in the batch).
    batch = [
        completion(c.id, c.subscription.id, "own_a", False, T0)
        for c in mine
        if c.id == taken.id or c.subscription.id != taken.subscription.id
    ]
    report = await s.store.complete_deliveries(batch, later)
    assert report.written == {c.delivery_id for c in batch} - {taken.id}
    assert set(report.failing) == {c.subscription_id for c in batch} - {taken.subscription.id}
    assert all(h == EndpointHealth(T0, 2) for h in report.failing.values())  # two each
    assert (await streaks(s))[taken.subscription.id] == (None, 0)
    async with s.c.engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(webhook_deliveries).where(webhook_deliveries.c.id == taken.id)
            )
        ).one()
        attempted = set((await conn.execute(sa.select(delivery_attempts.c.delivery_id))).scalars())
        lost = (
            await conn.execute(
                sa.select(delivery_attempts).where(delivery_attempts.c.delivery_id == taken.id)
            )
        ).one()
    assert (row.status, row.attempt_count, row.lease_owner) == ("pending", 1, "own_b")
    assert row.last_error.startswith("worker_lost: ")
    assert attempted == report.written | {taken.id}
    # Started at A's claim: its lease's expiry less the lease length (both 5 s here).
    assert (lost.number, lost.error_kind, lost.status_code) == (1, "worker_lost", None)
    assert lost.started_at == now
    assert row.round_started_at == now

    # The new holder's completion stands.
    done = await s.store.complete_deliveries(
        [completion(taken.id, taken.subscription.id, "own_b", True, T0, number=2)], later
    )
    assert done.written == {taken.id}


async def test_streaks_of_one_batch(setup: Setup) -> None:
    s = setup
    a, b, c = (sub.id for sub in s.subs)
    now = datetime.now(UTC)
    claimed = {
        x.id: x
        for x in await s.store.acquire_due_deliveries("own", now, now + timedelta(minutes=1), 10)
    }
    d = s.ids  # d[0], d[3] for a; d[1], d[4] for b; d[2], d[5] for c
    assert set(claimed) == set(d)
    # c starts failing in a batch of its own.
    first = await s.store.complete_deliveries([completion(d[2], c, "own", False, T0)], now)
    assert first.failing == {c: EndpointHealth(T0, 1)}

    t1, t2 = T0 + timedelta(seconds=1), T0 + timedelta(seconds=2)
    report = await s.store.complete_deliveries(
        [
            completion(d[0], a, "own", False, t1),  # a: a new streak
            completion(d[3], a, "own", False, t2),
            completion(d[1], b, "own", False, t1),  # b: failed, then succeeded: clear
            completion(d[4], b, "own", True, t2),
            completion(d[5], c, "own", True, t1),  # c: a success clears its streak
        ],
        now,
    )
    assert report.written == {d[0], d[3], d[1], d[4], d[5]}
    assert report.failing == {a: EndpointHealth(t1, 2)}
    assert await streaks(s) == {a: (t1, 2), b: (None, 0), c: (None, 0)}


async def test_the_claim_s_generic_plan_walks_the_due_index(setup: Setup) -> None:
    """The claim runs on its generic plan (servicekit.data.database.CLAIM_PLANNER_SQL): it must
    take the due deliveries from their partial index, oldest first, and read no more than the
    claim's limit, whatever the values."""
    s = setup
    if s.c.engine.dialect.name != "postgresql":
        pytest.skip("the asyncpg claim is PostgreSQL's")
    async with s.c.engine.connect() as conn:
        await conn.begin()
        db = await asyncpg_connection(conn)
        await db.execute(delivery_pg.CLAIM_PLANNER)
        args = (
            "w:explain",
            T0 + timedelta(days=3650),
            T0 + timedelta(days=3651),
            2,
            *delivery_pg.CLAIM_LOST_ARGS,
        )
        plan = await explain_generic(db, delivery_pg.CLAIM, *args)
        await conn.rollback()
    assert "next_attempt_at <= $2" in plan, plan  # generic: the plan shows no value
    assert "ix_webhook_deliveries_due_at" in plan, plan
    assert "Seq Scan" not in plan, plan
    assert "Bitmap" not in plan, plan
    most = max(int(n) for n in re.findall(r"actual time=\S+ rows=(\d+)", plan))
    assert most <= 2, plan


async def test_a_batch_writes_each_completions_own_columns(setup: Setup) -> None:
    """Every column of every completion lands on its own delivery and attempt: PostgreSQL's
    COMPLETE takes them as aligned arrays (`delivery_pg.complete_args`), so values distinct per
    delivery and per column catch an array out of line or a column swapped."""
    s = setup
    now = datetime.now(UTC)
    claimed = await s.store.acquire_due_deliveries("own_a", now, now + timedelta(minutes=1), 10)
    kinds = ("succeeded", "retrying", "dead")
    batch = []
    for i, c in enumerate(sorted(claimed, key=lambda c: c.id, reverse=True)):  # not id order
        status = kinds[i % 3]
        ok = status == "succeeded"
        at = T0 + timedelta(seconds=i)
        batch.append(
            DeliveryCompletion(
                delivery_id=c.id,
                subscription_id=c.subscription.id,
                owner="own_a",
                attempt=AttemptRecord(
                    number=1,
                    started_at=at,
                    duration_ms=100 + i,
                    status_code=200 + i if ok else 500 + i,
                    error_kind=None if ok else f"kind-{i}",
                    error_message=None if ok else f"message-{i}",
                    response_excerpt=f"excerpt-{i}",
                ),
                ok=ok,
                status=status,
                next_attempt_at=at + timedelta(minutes=i) if status == "retrying" else None,
                round_started_at=at - timedelta(hours=i),
                last_error=None if ok else f"last-{i}",
            )
        )
    written_at = now + timedelta(seconds=1)
    report = await s.store.complete_deliveries(batch, written_at)
    assert report.written == {c.delivery_id for c in batch}
    async with s.c.engine.connect() as conn:
        rows = {r.id: r for r in await conn.execute(sa.select(webhook_deliveries))}
        tried = {r.delivery_id: r for r in await conn.execute(sa.select(delivery_attempts))}
    for want in batch:
        row, a = rows[want.delivery_id], want.attempt
        terminal = want.status in ("succeeded", "dead")
        assert (row.status, row.attempt_count, row.round_attempts) == (want.status, 1, 1)
        assert (row.next_attempt_at, row.round_started_at, row.last_error) == (
            want.next_attempt_at,
            want.round_started_at,
            want.last_error,
        )
        assert (row.lease_owner, row.lease_expires_at) == (None, None)
        assert row.finished_at == (written_at if terminal else None)
        assert row.updated_at == written_at
        got = tried[want.delivery_id]
        assert (got.number, got.started_at, got.duration_ms, got.status_code) == (
            a.number,
            a.started_at,
            a.duration_ms,
            a.status_code,
        )
        assert (got.error_kind, got.error_message, got.response_excerpt) == (
            a.error_kind,
            a.error_message,
            a.response_excerpt,
        )
