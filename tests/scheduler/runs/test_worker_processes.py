"""`scheduler serve --role worker --processes 2` as a real process tree on PostgreSQL: two worker
children share due runs (each delivered exactly once to a loopback receiver), a SIGKILLed child is
replaced, SIGTERM stops them all with exit code 0, and children of a SIGKILLed parent stop on
their own. Children are found through /proc (their parent pid)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import aiohttp
import pytest
import sqlalchemy as sa

from scheduler.adapters.db.tables import runs
from scheduler.bootstrap import Container, utc_now
from scheduler.domain.policies import MisfirePolicy
from scheduler.service_layer.runs import trigger_run
from tests.scheduler.runs.conftest import add_schedule
from tests.scheduler.runs.processes import worker_env
from tests.scheduler.runs.receiver import Receiver
from tests.scheduler.runs.test_fault_processes import all_terminal, backdate, occurrence_counts
from tests.support.processes import ServiceProcess, equals, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

START_SECONDS = 90.0  # two children start on a loaded 2-core machine
STOP_SECONDS = 60.0


def parent(pg_url: str, tmp_path: Path, *args: str) -> ServiceProcess:
    return ServiceProcess(
        "scheduler.entrypoints.cli",
        tmp_path,
        env=worker_env(pg_url),
        args=("serve", "--role", "worker", "--port", "{port}", "--processes", "2", *args),
        name="parent",
        strip_env_prefixes=("SCHEDULER_", "AUTH_"),
    )


def children_of(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is `pid`."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            state, ppid = stat
            if ppid == pid and state != "Z":
                found.add(int(entry))
    return found


def kill_left(pids: set[int]) -> None:
    """SIGKILL what a failed test left running (children outlive a killed parent)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                ours = b"worker_process" in f.read()  # not a reused pid of someone else's
        except (FileNotFoundError, ProcessLookupError):
            continue
        if ours and running(pid):
            os.kill(pid, signal.SIGKILL)


def running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"  # an orphan's zombie may wait for its reaper


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[1])


async def metrics(proc: ServiceProcess) -> str:
    async with aiohttp.ClientSession() as s, s.get(proc.base_url + "/metrics") as r:
        assert r.status == 200
        return await r.text()


async def started(proc: ServiceProcess) -> tuple[int, set[int]]:
    """The parent's pid and its two children, once /readyz says all are ready."""
    await proc.start(START_SECONDS)
    await wait_until(lambda: equals(proc.status("/readyz"), 200), START_SECONDS, "readyz 200")
    assert proc.proc is not None
    kids = children_of(proc.proc.pid)
    assert len(kids) == 2, kids
    return proc.proc.pid, kids


async def test_two_processes_deliver_each_due_run_once_and_stop_on_sigterm(
    real: Container, pg_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    for i in range(20):
        await add_schedule(
            real, receiver.url("/slow/20"), name=f"s{i}", misfire=MisfirePolicy.FIRE_ALL
        )
    await backdate(real, 3)  # ~3-4 occurrences due per schedule, planned by both processes
    manual = await add_schedule(real, receiver.url("/slow/20"), name="manual", cron="0 0 1 1 *")
    triggered = {
        (
            await trigger_run(
                real.uow_factory, tenant_id="tenant-a", schedule_id=manual.id, clock=utc_now
            )
        ).id
        for _ in range(150)
    }
    proc = parent(pg_url, tmp_path, "--grace", "5")
    kids: set[int] = set()
    try:
        _, kids = await started(proc)
        text = await metrics(proc)
        assert 'scheduler_ready{process="0"}' in text
        assert 'scheduler_ready{process="1"}' in text
        assert text.count("# TYPE scheduler_ready gauge") == 1  # one family, two processes
        await wait_until(lambda: all_terminal(real), 120, "every due run terminal")
        proc.terminate()
        assert await proc.wait(STOP_SECONDS) == 0
        assert not any(running(k) for k in kids)
    finally:
        await proc.aclose()
        kill_left(kids)
    async with real.engine.connect() as conn:
        done = {
            r[0]
            for r in await conn.execute(sa.select(runs.c.id).where(runs.c.status == "succeeded"))
        }
    assert triggered <= done
    assert len(done) >= 150 + 20 * 3
    assert set(receiver.attempts_by_id) == done  # every succeeded run delivered, nothing else
    assert set(receiver.attempts_by_id.values()) == {1}  # each exactly once
    assert set((await occurrence_counts(real)).values()) == {1}  # one run per occurrence


async def test_a_killed_child_is_replaced_and_orphans_stop_on_their_own(
    pg_url: str, tmp_path: Path
) -> None:
    proc = parent(pg_url, tmp_path, "--grace", "2")
    kids: set[int] = set()
    try:
        pid, kids = await started(proc)
        victim, survivor = sorted(kids)
        os.kill(victim, signal.SIGKILL)

        def replaced() -> bool:
            now = children_of(pid)
            return len(now) == 2 and victim not in now and survivor in now

        await wait_until(replaced, START_SECONDS, "a new child in the dead one's place")
        await wait_until(lambda: equals(proc.status("/readyz"), 200), START_SECONDS, "ready again")
        assert "scheduler_worker_process_restarts_total 1.0" in await metrics(proc)
        assert "starting it again" in proc.output(tail=100_000)
        kids |= children_of(pid)
        proc.kill()  # the parent dies without a word: the children see their pipe close
        await proc.wait()
        await wait_until(
            lambda: not any(running(k) for k in kids), STOP_SECONDS, "orphaned children gone"
        )
        assert "the parent process is gone" in proc.output(tail=100_000)
    finally:
        await proc.aclose()
        kill_left(kids)
