"""What a receiver sees of a scheduler delivery (DESIGN.md §8), against a real loopback
receiver: X-Schedule-Id, X-Scheduled-For (the occurrence in RFC 3339 UTC with Z; for manual and
replay runs the instant they were requested) and X-Trigger on every attempt, beside the signed
set; the signature covers the id, the timestamp and the body, not these."""

from __future__ import annotations

from datetime import datetime

import webhookdeliver as wd
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.service_layer.runs import replay_run, trigger_run
from tests.scheduler.runs.conftest import SECRET, ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import make_dispatcher, plan_at_occurrence, step
from tests.scheduler.runs.receiver import Receiver


def z(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


async def test_planned_manual_and_replay_runs_carry_their_context(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/flaky/1"), initial_backoff=1)
    assert s.next_run_at is not None
    occurrence = s.next_run_at
    await plan_at_occurrence(uows, mclock, s)
    d = make_dispatcher(container, uows, deliverer)

    async def two_attempts() -> None:  # /flaky/1: 500, then 200 on the retry
        assert await step(d) == 1
        mclock.advance(seconds=60)
        assert await step(d) == 1

    mclock.advance(seconds=3.25)  # the attempt starts a little after the occurrence
    await two_attempts()
    manual_at = mclock.advance(seconds=7.5)
    manual = await trigger_run(uows, tenant_id="tenant-a", schedule_id=s.id, clock=mclock)
    await two_attempts()
    replay_at = mclock.advance(seconds=11.125)
    replay = await replay_run(
        uows, tenant_id="tenant-a", schedule_id=s.id, run_id=manual.id, clock=mclock
    )
    await two_attempts()

    got = [
        (
            r.headers["X-Webhook-Id"],
            r.headers["X-Attempt"],
            r.headers["X-Schedule-Id"],
            r.headers["X-Scheduled-For"],
            r.headers["X-Trigger"],
        )
        for r in receiver.requests
    ]
    planned_id = got[0][0]
    # Every attempt carries its run's instant: the occurrence, or when the run was requested.
    assert got == [
        (planned_id, "1", s.id, z(occurrence), "schedule"),
        (planned_id, "2", s.id, z(occurrence), "schedule"),
        (manual.id, "1", s.id, z(manual_at), "manual"),
        (manual.id, "2", s.id, z(manual_at), "manual"),
        (replay.id, "1", s.id, z(replay_at), "replay"),
        (replay.id, "2", s.id, z(replay_at), "replay"),
    ]
    assert got[0][3].endswith(":00Z")  # a minute's occurrence, UTC
    assert got[4][3].endswith(".875000Z")  # a request instant keeps its fraction of a second
    for r in receiver.requests:
        assert wd.verify([SECRET], r.headers, r.body)


async def test_the_signature_covers_id_timestamp_and_body_not_the_context(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/ok"))
    await plan_at_occurrence(uows, mclock, s)
    await step(make_dispatcher(container, uows, deliverer))
    (seen,) = receiver.requests
    headers = dict(seen.headers)
    assert wd.verify([SECRET], headers, seen.body)
    # Context headers are not signed: changing them leaves the signature valid ...
    for name in ("X-Schedule-Id", "X-Scheduled-For", "X-Trigger"):
        assert wd.verify([SECRET], {**headers, name: "changed"}, seen.body)
    # ... while the id, the timestamp and the body are.
    other_id = {**headers, "X-Webhook-Id": "run_other", "webhook-id": "run_other"}
    assert not wd.verify([SECRET], other_id, seen.body)
    later = str(int(headers["X-Timestamp"]) + 1)
    assert not wd.verify(
        [SECRET], {**headers, "X-Timestamp": later, "webhook-timestamp": later}, seen.body
    )
    assert not wd.verify([SECRET], headers, seen.body + b" ")
