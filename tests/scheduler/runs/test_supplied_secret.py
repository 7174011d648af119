"""A tenant-supplied signing secret (DESIGN.md §7b) signs the deliveries: a real loopback
receiver verifies them with that secret, and not with the secret the service would generate."""

from __future__ import annotations

import base64

import webhookdeliver as wd
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from tests.scheduler.runs.conftest import SECRET, ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import make_dispatcher, plan_at_occurrence, step
from tests.scheduler.runs.receiver import Receiver

SUPPLIED = "whsec_" + base64.b64encode(bytes(range(40))).decode()


async def test_deliveries_are_signed_with_the_supplied_secret(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/ok"), secret=SUPPLIED)
    await plan_at_occurrence(uows, mclock, s)
    mclock.advance(seconds=1)
    assert await step(make_dispatcher(container, uows, deliverer)) == 1
    [seen] = receiver.requests
    assert wd.verify([SUPPLIED], seen.headers, seen.body)
    assert not wd.verify([SECRET], seen.headers, seen.body)
