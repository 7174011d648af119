"""`python -m embedded` end to end, as a real subprocess in a fresh working directory on free
loopback ports: a schedule whose breaker trips on the first failed run pauses itself, and the
tenant hears about it through the shared in-process bus — an in-app notification and an .eml file
from notification, and a signed `schedule.paused` fan-out delivery to a `schedule.*` subscriber.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from aiohttp import web

from tests.support.processes import ServiceProcess, free_port, wait_until
from webhookdeliver import verify

DEADLINE_SECONDS = 30.0  # the whole scenario, start-up included
STOP_SECONDS = 15.0
T = TypeVar("T")
# Inherited settings that would point the child at other databases, brokers or keys.
_STRIPPED_PREFIXES = ("SCHEDULER_", "NOTIFICATION_", "AUTH_", "KAFKA_", "EMBEDDED_")


@dataclass
class Receiver:
    """Loopback endpoints: /fail answers 500; /events records what notification delivers."""

    port: int = 0
    events: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    failures: int = 0

    async def fail(self, request: web.Request) -> web.Response:
        await request.read()
        self.failures += 1
        return web.Response(status=500, text="down")

    async def event(self, request: web.Request) -> web.Response:
        self.events.append((dict(request.headers), await request.read()))
        return web.Response(status=204)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    app = web.Application()
    app.router.add_post("/fail", rec.fail)
    app.router.add_post("/events", rec.event)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    rec.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield rec
    await runner.cleanup()


@dataclass
class Embedded:
    proc: ServiceProcess
    scheduler: str
    notification: str
    token: str
    cwd: Path


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[Embedded]:
    nport = free_port()
    proc = ServiceProcess(
        "embedded",
        tmp_path,
        env={"WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"},
        args=(
            "--scheduler-port",
            "{port}",
            "--notification-port",
            str(nport),
            "--console-port",
            str(free_port()),
        ),
        health_path=None,  # the test itself waits for both services
        strip_env_prefixes=_STRIPPED_PREFIXES,
    )
    await proc.start()
    try:
        token = await _token_from_banner(proc)
        yield Embedded(proc, proc.base_url, f"http://127.0.0.1:{nport}", token, tmp_path)
    finally:
        if proc.proc is not None and proc.proc.returncode is None:
            proc.terminate()
            try:
                await proc.wait(STOP_SECONDS)
            except TimeoutError:
                await proc.aclose()


async def _token_from_banner(proc: ServiceProcess) -> str:
    """The banner's ready-to-paste `export TOKEN=...` line."""
    found: list[str] = []

    async def printed() -> bool:
        for line in proc.output(tail=100_000).splitlines():
            if line.strip().startswith("export TOKEN="):
                found.append(line.strip().removeprefix("export TOKEN="))
                return True
        assert proc.proc is not None
        if proc.proc.returncode is not None:
            raise AssertionError(f"embedded exited: {proc.output()}")
        return False

    await wait_until(printed, 20, "the banner's token")
    return found[0]


async def eventually(probe: Callable[[], Awaitable[T | None]], deadline: float, what: str) -> T:
    """Poll `probe` (a state change in another process) until it returns a value."""
    while time.monotonic() < deadline:
        value = await probe()
        if value is not None:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def test_breaker_pause_reaches_inbox_mail_and_subscriber(
    embedded: Embedded, receiver: Receiver
) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    headers = {"Authorization": f"Bearer {embedded.token}"}
    async with httpx.AsyncClient(headers=headers, timeout=10) as http:

        async def healthy() -> bool | None:
            with contextlib.suppress(httpx.TransportError):
                a = await http.get(f"{embedded.scheduler}/healthz")
                b = await http.get(f"{embedded.notification}/healthz")
                return True if a.status_code == b.status_code == 200 else None
            return None

        await eventually(healthy, deadline, "both services to listen")
        # The banner's token works against both services (same dev key under ./var).
        r = await http.put(
            f"{embedded.notification}/v1/alert-contacts", json={"emails": ["ops@example.com"]}
        )
        assert r.status_code == 200, r.text
        r = await http.post(
            f"{embedded.notification}/v1/subscriptions/",
            json={"url": f"http://127.0.0.1:{receiver.port}/events", "event_types": ["schedule.*"]},
        )
        assert r.status_code == 201, r.text
        subscription_secret = r.json()["secret"]
        r = await http.post(
            f"{embedded.scheduler}/v1/schedules/",
            json={
                "name": "flaky-report",
                "cron": "* * * * *",
                "timezone": "UTC",
                "action": "webhook",
                "target": {"url": f"http://127.0.0.1:{receiver.port}/fail", "timeout_seconds": 5},
                "retry_policy": {"max_attempts": 1},
                "breaker": {"failure_threshold": 1},
            },
        )
        assert r.status_code == 201, r.text
        schedule_id = r.json()["id"]
        # Run now rather than wait for the minute.
        r = await http.post(f"{embedded.scheduler}/v1/schedules/{schedule_id}/trigger")
        assert r.status_code == 202, r.text
        run_id = r.json()["id"]

        async def paused() -> dict[str, Any] | None:
            body = (await http.get(f"{embedded.scheduler}/v1/schedules/{schedule_id}")).json()
            return body if body["state"] == "paused" else None

        schedule = await eventually(paused, deadline, "the breaker to pause the schedule")
        assert schedule["paused_reason"] == "breaker"
        assert receiver.failures >= 1

        async def alert() -> dict[str, Any] | None:
            items = (await http.get(f"{embedded.notification}/v1/notifications/")).json()["items"]
            hits = [n for n in items if n["template"] == "schedule_auto_paused"]
            return hits[0] if hits else None

        note = await eventually(alert, deadline, "the in-app auto-pause alert")
        assert "flaky-report" in note["title"]
        assert "flaky-report" in note["body"]

        async def eml() -> str | None:
            for path in (embedded.cwd / "var" / "mail").glob("*.eml"):
                text = path.read_text()
                if "flaky-report" in text:
                    return text
            return None

        mail = await eventually(eml, deadline, "an .eml file under var/mail")
        assert "ops@example.com" in mail

        async def paused_event() -> tuple[dict[str, str], bytes] | None:
            for hdrs, body in receiver.events:
                if json.loads(body).get("type") == "schedule.paused":
                    return hdrs, body
            return None

        hdrs, body = await eventually(paused_event, deadline, "a schedule.paused delivery")
        assert verify([subscription_secret], hdrs, body)
        assert not verify(["whsec_" + "A" * 44], hdrs, body)  # the check is real
        envelope = json.loads(body)
        assert envelope["schedule_id"] == schedule_id
        assert envelope["tenant_id"] == "dev-tenant"

        # The terminal tells the same story: the failed run, the pause, the alert, one line each.
        runs = await eventually(
            lambda: _settled(_log_lines(embedded.proc, "scheduler.runs"), 2), deadline, "log"
        )
        # (A planned run of the next minute may add a line of its own: only this run's counts.)
        failed = [line for line in runs if line["event"].startswith("run ")]
        failed = [line for line in failed if line["run_id"] == run_id]
        assert len(failed) == 1, runs
        assert failed[0]["event"] == "run failed"
        assert failed[0]["level"] == "info"
        assert (failed[0]["schedule"], failed[0]["attempt"]) == ("flaky-report", 1)
        assert failed[0]["status_code"] == 500
        pauses = [line for line in runs if line["event"] == "schedule paused by the breaker"]
        assert [(p["schedule"], p["schedule_id"]) for p in pauses] == [
            ("flaky-report", schedule_id)
        ]
        alerts = [
            line
            for line in _log_lines(embedded.proc, "notification.service_layer.alerting")
            if line["event"] == "alert schedule_auto_paused"
        ]
        assert len(alerts) == 1, alerts
        assert alerts[0]["schedule_id"] == schedule_id
        assert alerts[0]["emails"] == 1
        _no_secret_after_banner(embedded, [subscription_secret])

    # SIGTERM stops both services cleanly.
    embedded.proc.terminate()
    assert await embedded.proc.wait(STOP_SECONDS) == 0


def _log_lines(proc: ServiceProcess, logger: str) -> list[dict[str, Any]]:
    """The child's JSON log records (its stderr is not a terminal) of `logger`."""
    records = []
    for line in proc.output(tail=10_000_000).splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("logger") == logger:
                    records.append(record)
    return records


async def _settled(lines: list[dict[str, Any]], at_least: int) -> list[dict[str, Any]] | None:
    return lines if len(lines) >= at_least else None


def _no_secret_after_banner(embedded: Embedded, secrets: list[str]) -> None:
    """The log never carries the dev token (the banner prints it, on purpose) nor a secret."""
    out = embedded.proc.output(tail=10_000_000)
    logged = out[out.index("export TOKEN=") :].split("\n", 1)[1]
    for secret in [embedded.token, *secrets]:
        assert secret not in logged


async def test_each_finished_run_is_one_log_line(embedded: Embedded) -> None:
    """`make run` logs every run's outcome: three triggered runs, three lines, in the order the
    runs finished, naming schedule, run, outcome and attempt."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    headers = {"Authorization": f"Bearer {embedded.token}"}
    async with httpx.AsyncClient(headers=headers, timeout=10) as http:
        r = await http.post(
            f"{embedded.scheduler}/v1/schedules/",
            json={"name": "hello", "cron": "0 0 1 1 *", "timezone": "UTC", "action": "event"},
        )
        assert r.status_code == 201, r.text
        schedule_id = r.json()["id"]
        run_ids = []
        for _ in range(3):
            r = await http.post(f"{embedded.scheduler}/v1/schedules/{schedule_id}/trigger")
            assert r.status_code == 202, r.text
            run_ids.append(r.json()["id"])

        async def three() -> list[dict[str, Any]] | None:
            lines = _log_lines(embedded.proc, "scheduler.runs")
            return lines if len(lines) >= 3 else None

        lines = await eventually(three, deadline, "three run lines")
    assert sorted(line["run_id"] for line in lines) == sorted(run_ids)
    for line in lines:
        assert line["event"] == "run succeeded"
        assert (line["schedule"], line["schedule_id"]) == ("hello", schedule_id)
        assert (line["outcome"], line["attempt"], line["level"]) == ("succeeded", 1, "info")
    _no_secret_after_banner(embedded, [])


_ASSET = re.compile(r"""(?:src|href)=["']([^"']+)["']""")


async def test_banner_means_both_ports_listen_and_docs_load_offline(embedded: Embedded) -> None:
    """The banner is printed only once both servers accept connections, so its links answer at
    once; each service's /docs and /redoc reference only assets the service itself serves."""
    banner = embedded.proc.output(tail=100_000)
    assert f"{embedded.scheduler}/docs" in banner
    assert f"{embedded.notification}/docs" in banner
    async with httpx.AsyncClient(timeout=10) as http:
        for base in (embedded.scheduler, embedded.notification):
            for page in ("/docs", "/redoc"):
                r = await http.get(base + page)  # no retry: listening since the banner
                assert r.status_code == 200, (base, page)
                html = r.text
                assert "://" not in html, html  # no CDN, no absolute URL of any host
                assets = _ASSET.findall(html)
                assert any(a.endswith(".js") for a in assets), html
                for asset in assets:
                    got = await http.get(base + asset)
                    assert got.status_code == 200, (base, asset)
                    assert len(got.content) > 1000, (base, asset)
            spec = await http.get(base + "/openapi.json")
            assert spec.status_code == 200


@pytest.mark.parametrize(
    ("taken", "flag", "variable"),
    [
        ("scheduler", "--scheduler-port", "EMBEDDED_SCHEDULER_PORT"),
        ("notification", "--notification-port", "EMBEDDED_NOTIFICATION_PORT"),
    ],
)
async def test_a_port_in_use_is_one_line_naming_the_port_and_how_to_change_it(
    tmp_path: Path, taken: str, flag: str, variable: str
) -> None:
    with socket.socket() as occupied:
        occupied.bind(("127.0.0.1", 0))
        occupied.listen()
        busy = occupied.getsockname()[1]
        ports = {"scheduler": str(free_port()), "notification": str(free_port())}
        ports[taken] = str(busy)
        proc = ServiceProcess(
            "embedded",
            tmp_path,
            args=(
                "--scheduler-port",
                ports["scheduler"],
                "--notification-port",
                ports["notification"],
            ),
            health_path=None,
            strip_env_prefixes=_STRIPPED_PREFIXES,
        )
        await proc.start()
        try:
            code = await proc.wait(STOP_SECONDS)
        finally:
            await proc.aclose()
    lines = proc.output().strip().splitlines()
    assert code != 0
    assert len(lines) == 1, lines  # no traceback, no banner, no start-up logs
    assert str(busy) in lines[0]
    assert flag in lines[0]
    assert variable in lines[0]
