"""The relay as a worker: built from the composition root's container over its database."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry

from eventbus import InProcessBus, decode
from scheduler.adapters.db.migrate import upgrade
from scheduler.bootstrap import bootstrap, make_relay, relay_config
from scheduler.config import SchedulerSettings
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from scheduler.domain.policies import Action
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer.schedules import create_schedule
from tests.scheduler.conftest import HS256_KEY, SECRET_KEY, StepClock
from tests.scheduler.definitions import definition


async def test_worker_relays_what_the_containers_unit_of_work_wrote(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'scheduler.db'}"
    await upgrade(url)
    settings = SchedulerSettings(database_url=url, secret_key=SECRET_KEY, auth_hs256_key=HS256_KEY)
    container = bootstrap(settings, clock=StepClock())
    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    registry = CollectorRegistry()
    relay = make_relay(container, publisher, registry=registry)
    assert relay.config == relay_config(settings)  # defaults until settings define overrides
    consumer = bus.consumer([SCHEDULE_EVENTS_TOPIC], "reader")
    await consumer.start()
    task = asyncio.create_task(relay.run())  # what `serve --role worker` runs
    try:
        created = await create_schedule(
            container.uow_factory(),
            definition(
                name="nightly", cron="0 3 * * *", timezone="UTC", action=Action.EVENT, target=None
            ),
            tenant_id="tenant-a",
            clock=container.clock,
            new_secret=container.new_secret,
            limits=Entitlements(),
        )
        relay.wake()
        records = await consumer.poll(timeout_seconds=5.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await consumer.stop()
        await container.aclose()
    assert [decode(r.value)["schedule_id"] for r in records] == [created.schedule.id]
    assert registry.get_sample_value("scheduler_outbox_published_total") == 1
