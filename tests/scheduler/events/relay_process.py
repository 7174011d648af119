"""A real outbox-relay process and a consumer that records what reached the broker, for the
SIGKILL proof.

`RelayProcess` is `python -m scheduler.entrypoints.workers` with every worker but the relay
switched off, publishing to a Kafka-protocol broker (tansu: KAFKA_IDEMPOTENT=false) with small
batches, so that a kill lands between batches and not only at the end.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path

from eventbus import KafkaConsumer, Record, decode
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from tests.scheduler.runs.processes import WorkerProcess, worker_env
from tests.support.kafka import FAST_GROUP_JOIN

ONLY_THE_RELAY = ("--no-planner", "--no-dispatcher", "--no-tenant-consumer")


class RelayProcess(WorkerProcess):
    def __init__(self, database_url: str, bootstrap: str, workdir: Path, batch: int) -> None:
        env = worker_env(
            database_url,
            KAFKA_BOOTSTRAP_SERVERS=bootstrap,
            KAFKA_IDEMPOTENT="false",  # tansu refuses InitProducerId
            SCHEDULER_OUTBOX_BATCH_SIZE=str(batch),
            SCHEDULER_OUTBOX_POLL_INTERVAL_SECONDS="0.1",
        )
        super().__init__(database_url, workdir, *ONLY_THE_RELAY, env=env)


class Collector:
    """Every schedule-events record, read by a consumer group of its own from the earliest
    offset, in consumption order."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = KafkaConsumer(
            bootstrap, [SCHEDULE_EVENTS_TOPIC], f"sigkill-{uuid.uuid4().hex[:8]}", **FAST_GROUP_JOIN
        )
        self.records: list[Record] = []

    async def start(self) -> Collector:
        await self.consumer.start()
        return self

    async def stop(self) -> None:
        await self.consumer.stop()

    async def poll(self) -> None:
        self.records += await self.consumer.poll(max_records=500, timeout_seconds=0.2)

    async def poll_to(self, ends: dict[int, int], timeout_seconds: float) -> None:
        """Poll until every partition was read up to its end offset in `ends`."""
        try:
            async with asyncio.timeout(timeout_seconds):
                while any(self._next_offset(p) < end for p, end in ends.items()):
                    await self.poll()
        except TimeoutError:
            reached = {p: self._next_offset(p) for p in ends}
            raise AssertionError(
                f"not read to the end offsets {ends} within {timeout_seconds} s:"
                f" next offsets reached per partition {reached}"
            ) from None

    def _next_offset(self, partition: int) -> int:
        offsets = [r.offset for r in self.records if r.partition == partition]
        return max(offsets) + 1 if offsets else 0

    def ids(self) -> list[str]:
        return [str(decode(r.value)["id"]) for r in self.records]

    def counts(self) -> Counter[str]:
        return Counter(self.ids())
