"""The delivery discipline under faults: two `notification serve` processes on one PostgreSQL
database, a dispatch lease shortened to 3 s and a loopback receiver that answers about 6% of
requests only after 5-6.5 s (longer than the lease, so only lease renewal keeps those
deliveries with their dispatcher).

Every delivery must end in exactly one terminal state with one attempt row per attempt, none
lost; a delivery is POSTed twice only when a lease was lost and the other replica redid it, and
each such redelivery is a completion the first replica dropped (its write found the lease
taken over). `tests/notification/test_delivery_leases.py` runs it small in CI;
`bench/notification_bench.py` runs it with 2,000 deliveries and reports the figures.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import sqlalchemy as sa
from aiohttp import web
from pydantic import SecretStr

from notification.adapters.tables import delivery_attempts, webhook_deliveries
from notification.bootstrap import bootstrap
from notification.config import NotificationSettings
from notification.service_layer.ports import NewDelivery, SubscriptionRecord
from servicekit.data.secretbox import generate_key
from tests.support.processes import ServiceProcess, wait_until

AUTH_KEY = "replica-fault-key-" + "x" * 40
# Log lines of a replica that mean something went wrong (a failed step, a rolled-back write).
_FAILURE = re.compile(r"step failed|Traceback|IntegrityError|cannot write", re.IGNORECASE)
_DROPPED = re.compile(r"^notification_delivery_completions_dropped_total\s+(\S+)$", re.MULTILINE)


@dataclass
class SlowReceiver:
    """A real aiohttp server on 127.0.0.1: answers 200, a `slow_share` of requests only after
    `slow_seconds`; counts the requests per X-Webhook-Id."""

    rng: random.Random
    slow_share: float = 0.06
    slow_seconds: tuple[float, float] = (5.0, 6.5)
    url: str = ""
    requests: Counter[str] = field(default_factory=Counter)
    slow: int = 0
    _runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.requests[request.headers["X-Webhook-Id"]] += 1
        if self.rng.random() < self.slow_share:
            self.slow += 1
            await asyncio.sleep(self.rng.uniform(*self.slow_seconds))
        return web.Response(text="ok")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/hook"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@dataclass
class ReplicaReport:
    deliveries: int
    by_status: dict[str, int]
    not_terminal: int
    missing: int
    attempt_rows: int
    attempt_count_mismatches: int
    """Deliveries whose attempt_count differs from their attempt rows (numbers are unique)."""
    requests: int
    duplicate_requests: int
    """POSTs beyond the first of each delivery: redeliveries after a lost lease."""
    dropped_completions: int
    """Completions the replicas did not write because their lease had been taken over."""
    slow_answers: int
    failures_logged: list[str]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def replica_settings(db_url: str, secret_key: str, **overrides: Any) -> NotificationSettings:
    return NotificationSettings(
        database_url=db_url,
        secret_key=SecretStr(secret_key),
        webhook_allow_private_networks=True,
        kafka_bootstrap_servers=None,
        **overrides,
    )


async def create_endpoints(
    settings: NotificationSettings, target_url: str, endpoints: int = 1
) -> list[SubscriptionRecord]:
    """Migrate and create `endpoints` subscriptions to `target_url`, one tenant each."""
    c = bootstrap(settings)
    try:
        await c.migrate()
        return [
            (
                await c.subscriptions.create(f"t{i}", target_url, ["schedule.*"], None, True)
            ).subscription
            for i in range(endpoints)
        ]
    finally:
        await c.aclose()


async def insert_due_deliveries(
    settings: NotificationSettings, subs: list[SubscriptionRecord], n: int
) -> list[str]:
    """Insert `n` deliveries due now, spread over `subs`. Returns their ids."""
    c = bootstrap(settings)
    now = datetime.now(UTC)
    rows = [
        NewDelivery(
            id=f"msg_{i:032d}",
            tenant_id=subs[i % len(subs)].tenant_id,
            subscription_id=subs[i % len(subs)].id,
            event_id=f"evt_{i:026d}",
            event_type="schedule.triggered",
            body=b'{"type": "schedule.triggered", "data": {"i": %d}}' % i,
        )
        for i in range(n)
    ]
    try:
        for i in range(0, n, 1000):
            await c.store.insert_deliveries(rows[i : i + 1000], now)
    finally:
        await c.aclose()
    return [r.id for r in rows]


async def delivery_state(db_url: str) -> tuple[dict[str, int], int, int, int]:
    """(count by status, deliveries, attempt rows, attempt_count mismatches)."""
    c = bootstrap(replica_settings(db_url, generate_key()))
    d, a = webhook_deliveries, delivery_attempts
    per = (
        sa.select(a.c.delivery_id, sa.func.count().label("n")).group_by(a.c.delivery_id).subquery()
    )
    try:
        async with c.engine.connect() as conn:
            result = await conn.execute(sa.select(d.c.status, sa.func.count()).group_by(d.c.status))
            statuses = {str(status): int(count) for status, count in result}
            rows = int((await conn.execute(sa.select(sa.func.count()).select_from(a))).scalar_one())
            mismatches = int(
                (
                    await conn.execute(
                        sa.select(sa.func.count())
                        .select_from(d.outerjoin(per, per.c.delivery_id == d.c.id))
                        .where(d.c.attempt_count != sa.func.coalesce(per.c.n, 0))
                    )
                ).scalar_one()
            )
    finally:
        await c.aclose()
    return statuses, sum(statuses.values()), rows, mismatches


async def _dropped(proc: ServiceProcess) -> int:
    async with aiohttp.ClientSession() as s, s.get(proc.base_url + "/metrics") as r:
        text = await r.text()
    match = _DROPPED.search(text)
    return int(float(match.group(1))) if match else 0


async def run_two_replicas(
    db_url: str,
    workdir: Path,
    n: int,
    *,
    lease_seconds: float = 3.0,
    slow_share: float = 0.06,
    seed: int = 11,
    timeout_seconds: float = 240.0,
) -> ReplicaReport:
    """Start two replicas, hand them `n` due deliveries at once, wait until every one is
    terminal (or the timeout), stop them with SIGTERM and read back what happened."""
    key = generate_key()
    receiver = SlowReceiver(random.Random(seed), slow_share=slow_share)
    await receiver.start()
    env = {
        "NOTIFICATION_DATABASE_URL": db_url,
        "NOTIFICATION_SECRET_KEY": key,
        "AUTH_HS256_KEY": AUTH_KEY,
        "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
        "NOTIFICATION_DISPATCH_LEASE_SECONDS": str(lease_seconds),
        "NOTIFICATION_POLL_INTERVAL_SECONDS": "0.2",
        "NOTIFICATION_VAR_DIR": str(workdir / "var"),
    }
    replicas = [
        ServiceProcess(
            "notification.entrypoints.cli",
            workdir,
            env=env,
            args=("serve", "--port", "{port}"),
            name=f"replica{i}",
        )
        for i in range(2)
    ]
    try:
        settings = replica_settings(db_url, key)
        subs = await create_endpoints(settings, receiver.url)
        for r in replicas:
            await r.start()
        ids = await insert_due_deliveries(settings, subs, n)
        started = time.perf_counter()

        async def all_terminal() -> bool:
            statuses, _, _, _ = await delivery_state(db_url)
            return statuses.get("succeeded", 0) + statuses.get("dead", 0) >= n

        await wait_until(all_terminal, timeout_seconds, f"{n} deliveries terminal", every=0.5)
        seconds = time.perf_counter() - started
        dropped = sum([await _dropped(r) for r in replicas])
        for r in replicas:
            r.terminate()
        for r in replicas:
            await r.wait()
    finally:
        for r in replicas:
            await r.aclose()
        await receiver.stop()
    statuses, count, attempt_rows, mismatches = await delivery_state(db_url)
    terminal = statuses.get("succeeded", 0) + statuses.get("dead", 0)
    requests = sum(receiver.requests.values())
    failures = [
        line.strip()
        for r in replicas
        for line in r.log.read_text(errors="replace").splitlines()
        if _FAILURE.search(line)
    ]
    return ReplicaReport(
        deliveries=n,
        by_status=statuses,
        not_terminal=count - terminal,
        missing=len(ids) - count,
        attempt_rows=attempt_rows,
        attempt_count_mismatches=mismatches,
        requests=requests,
        duplicate_requests=requests - len(receiver.requests),
        dropped_completions=dropped,
        slow_answers=receiver.slow,
        failures_logged=failures[:20],
        seconds=round(seconds, 2),
    )
