"""Fault proofs for both APIs as real processes on PostgreSQL: slow or oversized clients must
neither starve ordinary requests nor hold connections or memory:

- 1,000 slow-header and 100 slow-body clients, reconnecting whenever they are cut, against each
  API for 10 s: ordinary authenticated requests never fail and keep a p99 under 200 ms, every
  slow connection is closed within its read timeout (2 s here) plus slack, and the closes are
  logged a few times, not per connection. The p99 is judged beside an unattacked replica timed
  at the same moments: on a machine busy with other work the bound grows by the factor that
  replica is slower than on a quiet one, and past 100 ms there is nothing left to judge;
- a 100 MB chunked POST is cut at the body limit without the server's RSS growing, and a
  declared Content-Length over the limit is answered 413 at once.

The test process holds every slow client's socket: its soft RLIMIT_NOFILE is raised to 4,096 if
lower (skipped when the hard limit does not allow it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from authclient import mint_token
from tests.scheduler.conftest import HS256_KEY, SECRET_KEY
from tests.support.pg import fresh_postgres_database
from tests.support.processes import ServiceProcess
from tests.support.slow_clients import normal_clients, raise_descriptor_limit

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

READ_TIMEOUT_SECONDS = 2.0
SLACK_SECONDS = 3.0  # a loaded 2-core machine may run a deadline late by this much
P99_BOUND_SECONDS = 0.2
CONTROL_QUIET_SECONDS = 0.035  # the unattacked replica's p99 on a quiet 2-core machine: 25-31 ms
CONTROL_OVERLOADED_SECONDS = 0.1
ATTACK_SECONDS = 10.0
MAX_REQUEST_BYTES = 262_144
DESCRIPTORS_NEEDED = 4096
SCOPES = ["schedules:read", "schedules:write", "notifications:read", "notifications:write"]


@dataclass(frozen=True)
class Service:
    name: str
    module: str
    args: tuple[str, ...]
    prefix: str
    list_path: str


SERVICES = {
    "scheduler": Service(
        "scheduler",
        "scheduler.entrypoints.cli",
        ("serve", "--role", "api", "--port", "{port}"),
        "SCHEDULER",
        "/v1/schedules/",
    ),
    "notification": Service(
        "notification",
        "notification.entrypoints.cli",
        ("serve", "--port", "{port}"),
        "NOTIFICATION",
        "/v1/subscriptions/",
    ),
}


@pytest.fixture(autouse=True)
def descriptors() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < DESCRIPTORS_NEEDED:
        pytest.skip(f"hard RLIMIT_NOFILE {hard} < {DESCRIPTORS_NEEDED}")
    raise_descriptor_limit(DESCRIPTORS_NEEDED)
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def service_env(service: Service, database_url: str) -> dict[str, str]:
    p = service.prefix
    return {
        f"{p}_DATABASE_URL": database_url,
        f"{p}_SECRET_KEY": SECRET_KEY,
        "AUTH_HS256_KEY": HS256_KEY,
        f"{p}_HTTP_HEADER_TIMEOUT_SECONDS": str(READ_TIMEOUT_SECONDS),
        f"{p}_HTTP_BODY_TIMEOUT_SECONDS": str(READ_TIMEOUT_SECONDS),
        f"{p}_MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES),
        "LOG_FORMAT": "json",
    }


@contextlib.asynccontextmanager
async def running(
    service: Service, tmp_path: Path, *, nofile: int | None = None, replicas: int = 1
) -> AsyncIterator[list[ServiceProcess]]:
    """`replicas` processes of the service on one fresh, migrated PostgreSQL database;
    `nofile`: their RLIMIT_NOFILE."""
    async with fresh_postgres_database(f"http_{service.name}") as url:
        env = service_env(service, url)
        migrate = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            service.module,
            "migrate",
            cwd=tmp_path,
            env={**_clean_env(), **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(migrate.communicate(), 60)
        assert migrate.returncode == 0, err.decode()[-2000:]
        module, args = service.module, service.args
        if nofile is not None:
            module, args = "tests.support.rlimited", (str(nofile), module, *args)
        procs = [
            ServiceProcess(
                module,
                tmp_path,
                env=env,
                args=args,
                name=service.name,
                strip_env_prefixes=("SCHEDULER_", "NOTIFICATION_", "AUTH_", "KAFKA_", "LOG_"),
            )
            for _ in range(replicas)
        ]
        try:
            for proc in procs:
                await proc.start()
            yield procs
        finally:
            for proc in procs:
                await proc.aclose()


def _clean_env() -> dict[str, str]:
    import os

    prefixes = ("SCHEDULER_", "NOTIFICATION_", "AUTH_", "KAFKA_", "LOG_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def token() -> str:
    return mint_token(HS256_KEY, tenant_id="tenant-http", scopes=SCOPES, ttl_seconds=3600)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("name", list(SERVICES))
async def test_slow_clients_are_cut_and_normal_clients_stay_fast(name: str, tmp_path: Path) -> None:
    service = SERVICES[name]
    hold_cap = READ_TIMEOUT_SECONDS + 10 * SLACK_SECONDS
    async with running(service, tmp_path, replicas=2) as [proc, control]:
        url = proc.base_url + service.list_path
        # The slow clients run in a process of their own: the normal ones timed here share no
        # event loop with them.
        attacker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.slow_clients",
            proc.base_url,
            token(),
            service.list_path,
            "--duration",
            str(ATTACK_SECONDS),
            "--hold-cap",
            str(hold_cap),
            stdout=subprocess.PIPE,
        )
        try:
            assert attacker.stdout is not None
            line = await asyncio.wait_for(attacker.stdout.readline(), 60)
            assert line.strip() == b"ready", line
            # The control replica is not attacked but shares the machine (and its load) with
            # the attacked one at the same moments.
            normal, control_figures = await asyncio.gather(
                normal_clients(url, token(), duration=ATTACK_SECONDS - 1),
                normal_clients(
                    control.base_url + service.list_path, token(), duration=ATTACK_SECONDS - 1
                ),
            )
            out, _ = await asyncio.wait_for(attacker.communicate(), hold_cap + ATTACK_SECONDS + 60)
        finally:
            if attacker.returncode is None:
                attacker.kill()
                await attacker.wait()
        slow = json.loads(out.splitlines()[-1])
        held = slow.pop("held_seconds")
        summary = {
            **slow,
            **{k: v for k, v in normal.summary().items() if "normal" in k},
            "control_p99_ms": round(control_figures.p99() * 1000, 1),
        }
        print(json.dumps({"service": name, **summary}))  # the figures, with -s
        log = proc.log.read_text(errors="replace")
    assert slow["slow_still_open_at_cap"] == 0, summary
    assert max(held) <= READ_TIMEOUT_SECONDS + SLACK_SECONDS, summary
    assert len(held) >= 1100, summary
    assert normal.normal_failures == [], normal.normal_failures[:5]
    assert len(normal.latencies) >= 100, summary
    assert control_figures.normal_failures == [], control_figures.normal_failures[:5]
    # Thousands of cut connections, a handful of log lines.
    closes = [line for line in log.splitlines() if "http: closed a connection" in line]
    assert 1 <= len(closes) <= 10, closes[:20]
    assert "Traceback" not in log
    # 200 ms on a quiet machine (there: 38-56 ms under the attack, 25-31 ms on the control).
    # Other work on the machine slows both replicas alike, so the bound grows with the control's
    # slowdown (a CI run beside other jobs: control 70 ms, attacked 202 ms). A machine so loaded
    # that even the control is slower than 100 ms cannot judge it: that is a skip naming the
    # figures, never a pass.
    bound = p99_bound(control_figures.p99())
    if normal.p99() >= bound and control_figures.p99() > CONTROL_OVERLOADED_SECONDS:
        pytest.skip(f"machine too loaded to judge the p99: {summary}")
    assert normal.p99() < bound, {**summary, "p99_bound_ms": round(bound * 1000, 1)}


def p99_bound(control_p99: float) -> float:
    """The attacked replica's p99 bound, given the unattacked one's at the same moments."""
    return P99_BOUND_SECONDS * max(1.0, control_p99 / CONTROL_QUIET_SECONDS)


def test_the_p99_bound_grows_only_with_the_machines_own_slowdown() -> None:
    assert p99_bound(0.010) == P99_BOUND_SECONDS
    assert p99_bound(CONTROL_QUIET_SECONDS) == P99_BOUND_SECONDS
    assert p99_bound(0.070) == pytest.approx(0.4)


async def _post_chunked(port: int, path: str, total: int, chunk: int) -> tuple[bytes, int, float]:
    """POST `total` bytes chunked, reading concurrently; returns (answer, bytes sent before the
    answer's head arrived, seconds). After the answer the server discards the rest of the body
    (its lingering close) as fast as it comes, so what the client sends after it only measures
    the client: the bytes that count are those written before the 413 was read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = 0
    piece = b"[" + b"0," * (chunk // 2 - 1) + b"0"

    async def upload() -> None:
        nonlocal sent
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token()}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        with contextlib.suppress(ConnectionError):
            while sent < total:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()  # returns without yielding while the peer keeps up
                sent += len(piece)
                await asyncio.sleep(0)  # so the reader sees the answer as soon as it arrives

    started = time.monotonic()
    sender = asyncio.create_task(upload())
    sent_at_answer = total
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        sent_at_answer = sent
        answer = head + await asyncio.wait_for(reader.read(), 30)
    except (ConnectionResetError, asyncio.IncompleteReadError):
        sent_at_answer = min(sent_at_answer, sent)
        answer = b""
    elapsed = time.monotonic() - started
    sender.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sender
    writer.close()
    return answer, sent_at_answer, elapsed


@pytest.mark.parametrize("name", list(SERVICES))
async def test_huge_bodies_are_refused_at_the_limit(name: str, tmp_path: Path) -> None:
    service = SERVICES[name]
    async with running(service, tmp_path) as [proc]:
        assert proc.proc is not None
        pid = proc.proc.pid
        # Warm up (imports, pools) so RSS measures the upload, not the first request.
        assert await proc.status("/healthz") == 200
        before = rss_kib(pid)
        answer, sent, elapsed = await _post_chunked(
            proc.port, service.list_path, total=100 * 1024 * 1024, chunk=64 * 1024
        )
        after = rss_kib(pid)
        print(
            json.dumps(
                {
                    "service": name,
                    "rss_before_kib": before,
                    "rss_after_kib": after,
                    "sent_bytes": sent,
                    "seconds": round(elapsed, 2),
                }
            )
        )
        if answer:  # a client still writing may see the close as a reset first
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 413 "), head
            assert json.loads(body)["type"].endswith("/payload-too-large")
        assert sent < 20 * 1024 * 1024  # answered near the limit, not after reading to the end
        assert after - before < 8 * 1024, (before, after)  # KiB: a few MB at most

        # A declared length over the limit: 413 before any body byte is sent.
        reader, writer = await asyncio.open_connection("127.0.0.1", proc.port)
        writer.write(
            f"POST {service.list_path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token()}\r\n"
            "Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n".encode()
        )
        started = time.monotonic()
        answer = await asyncio.wait_for(reader.read(), 10)
        elapsed = time.monotonic() - started
        writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413 "), head
        assert b"application/problem+json" in head
        assert json.loads(body)["status"] == 413
        assert elapsed < 2.0


@pytest.mark.parametrize("name", list(SERVICES))
async def test_past_the_connection_cap_clients_get_503_and_descriptors_last(
    name: str, tmp_path: Path
) -> None:
    """With only 512 descriptors the cap is lowered to fit (one warning); a flood of 700 silent
    connections gets 503 beyond it instead of accept() failing with EMFILE, and once the held
    ones time out the API answers again."""
    service = SERVICES[name]
    async with running(service, tmp_path, nofile=512) as [proc]:
        assert proc.proc is not None
        fd_dir = Path(f"/proc/{proc.proc.pid}/fd")
        started = time.monotonic()
        conns = [await asyncio.open_connection("127.0.0.1", proc.port) for _ in range(700)]
        answers = await asyncio.gather(
            *(asyncio.wait_for(_read_or_reset(r), READ_TIMEOUT_SECONDS + 10) for r, _ in conns)
        )
        # A held connection frees its slot when it times out, so a flood the server accepts more
        # slowly than the read timeout (a loaded machine) is admitted in several generations of
        # at most the cap (192 here; 256 with slack) each: never more than that at once.
        # The last generation's answers come one timeout after it was admitted.
        admitting = max(0.0, time.monotonic() - started - READ_TIMEOUT_SECONDS)
        generations = 1 + int(admitting / READ_TIMEOUT_SECONDS)
        descriptors = len(list(fd_dir.iterdir()))
        for _, w in conns:
            w.close()
        refused = sum(a.startswith(b"HTTP/1.1 503 ") for a in answers)
        timed_out = sum(a.startswith(b"HTTP/1.1 408 ") for a in answers)
        assert refused > 0, (refused, timed_out)
        assert timed_out <= 256 * generations, (refused, timed_out, generations)
        assert refused + timed_out == 700, answers[:3]
        assert descriptors < 512
        assert await proc.status("/healthz") == 200
        log = proc.log.read_text(errors="replace")
    assert "out of system resource" not in log
    assert log.count("RLIMIT_NOFILE") == 1
    refusals = [line for line in log.splitlines() if "http: refused a connection" in line]
    assert 1 <= len(refusals) <= 3


async def _read_or_reset(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.read()
    except ConnectionResetError:
        return b""
