"""The console's browser tests: a real `python -m embedded` (its one-origin gateway on a free
port), a loopback receiver and Debian's Chromium driven by Playwright.

Chromium is `/usr/bin/chromium` (`apt-get install chromium`; `.ci/run` installs it and sets
REQUIRE_CHROMIUM=1, so a missing browser fails CI; elsewhere these tests skip and say why).
Screenshots of every page, at 1280 px and 390 px, go to var/screenshots/ (gitignored) or
$CONSOLE_SCREENSHOTS.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from playwright.async_api import Browser, Page, async_playwright

from tests.support.http import serve_on_loopback
from tests.support.processes import ServiceProcess, free_port, wait_until

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(
    os.environ.get("CONSOLE_SCREENSHOTS", Path(__file__).parents[2] / "var" / "screenshots")
)
XSS = "<img src=x onerror=window.__xss=1>"
STOP_SECONDS = 15.0
_STRIPPED_PREFIXES = ("SCHEDULER_", "NOTIFICATION_", "AUTH_", "KAFKA_", "EMBEDDED_")


@dataclass
class Receiver:
    """/ok answers 200; /fail answers 500 with markup in its body (the response excerpt);
    /events records notification's deliveries."""

    port: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()

    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    async def fail(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=500, text=f"down {XSS}", content_type="text/html")

    async def event(request: web.Request) -> web.Response:
        rec.events.append(json.loads(await request.read()))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/ok", ok)
    app.router.add_post("/fail", fail)
    app.router.add_post("/events", event)
    async with serve_on_loopback(app) as port:
        rec.port = port
        yield rec


@dataclass
class Console:
    origin: str
    """The gateway: console at /, both APIs under /v1."""
    link: str
    """The banner's sign-in link (`#token=...`)."""
    token: str
    workdir: Path
    scheduler_url: str = ""
    """The scheduler's own port (its API and /docs)."""
    notification_url: str = ""
    """Notification's own port."""

    def api(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.origin, headers={"Authorization": f"Bearer {self.token}"}, timeout=30
        )


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    gateway, notif = free_port(), free_port()
    proc = ServiceProcess(
        "embedded",
        tmp_path,
        env={"WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true", "SCHEDULER_DEFAULT_MAX_SCHEDULES": "5000"},
        args=(
            "--scheduler-port",
            "{port}",
            "--notification-port",
            str(notif),
            "--console-port",
            str(gateway),
        ),
        health_path=None,
        strip_env_prefixes=_STRIPPED_PREFIXES,
    )
    await proc.start()
    found: list[str] = []

    async def linked() -> bool:
        m = re.search(r"^(http://\S+/#token=(\S+))$", proc.output(tail=100_000), re.M)
        if m:
            found[:] = [m.group(1), m.group(2)]
            return True
        assert proc.proc is not None
        if proc.proc.returncode is not None:
            raise AssertionError(f"embedded exited: {proc.output()}")
        return False

    try:
        await wait_until(linked, 30, "the banner's console link")
        yield Console(
            f"http://127.0.0.1:{gateway}",
            found[0],
            found[1],
            tmp_path,
            scheduler_url=proc.base_url,
            notification_url=f"http://127.0.0.1:{notif}",
        )
    finally:
        if proc.proc is not None and proc.proc.returncode is None:
            proc.terminate()
            try:
                await proc.wait(STOP_SECONDS)
            except TimeoutError:
                await proc.aclose()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not CHROMIUM.exists():
        if os.environ.get("REQUIRE_CHROMIUM") == "1":
            pytest.fail("REQUIRE_CHROMIUM=1 but /usr/bin/chromium is missing")
        pytest.skip("Chromium missing: apt-get install -y --no-install-recommends chromium")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    p = await context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.on(
        "console",
        lambda m: errors.append(m.text) if m.type == "error" and "CSP" in m.text else None,
    )
    p.set_default_timeout(15_000)
    yield p
    await context.close()
    assert not errors, f"errors in the page: {errors}"


async def shoot(page: Page, name: str, *, full_page: bool = True) -> None:
    """Screenshots of the current page at 1280 px and at phone width (390 px)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / f"{name}-1280.png", full_page=full_page)
    await page.set_viewport_size({"width": 390, "height": 844})
    await page.screenshot(path=SCREENSHOTS / f"{name}-390.png", full_page=full_page)
    await page.set_viewport_size({"width": 1280, "height": 900})


async def until(page: Page, expression: str, timeout: float = 15.0) -> None:
    """Poll a JS expression until truthy. (`page.wait_for_function` evaluates a string, which
    the console's CSP refuses, as it should: no 'unsafe-eval'.)"""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await page.evaluate(expression):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {expression}")
        await asyncio.sleep(0.02)
