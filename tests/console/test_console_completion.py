"""Completion callbacks in the console, in Chromium (DESIGN.md §7b "Completion"): the form sets
callback mode with its timeout and minimum duration; a run the target accepted shows "accepted,
awaiting completion" with its deadline in the schedule's zone; once the target calls back, the
run shows when it completed, the callback's detail and output as text (markup stays text), and
that it was too fast; the form switches the schedule back to response mode."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

import httpx
import pytest
from aiohttp import web
from playwright.async_api import Page, expect

from tests.console.conftest import XSS, Console, shoot
from tests.support.http import serve_on_loopback
from tests.support.processes import wait_until

ZONE = "America/New_York"


@dataclass
class Accepting:
    """A target that accepts each delivery (202) and keeps its completion URL and token."""

    port: int = 0
    accepted: list[tuple[str, str]] = field(default_factory=list)

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jobs"


@pytest.fixture
async def accepting() -> AsyncIterator[Accepting]:
    target = Accepting()

    async def job(request: web.Request) -> web.Response:
        await request.read()
        target.accepted.append(
            (request.headers["X-Run-Complete-Url"], request.headers["X-Run-Complete-Token"])
        )
        return web.Response(status=202, text="accepted")

    app = web.Application()
    app.router.add_post("/jobs", job)
    async with serve_on_loopback(app) as port:
        target.port = port
        yield target


async def test_callback_run_awaits_then_shows_completion_detail_and_output(
    console: Console, accepting: Accepting, page: Page
) -> None:
    await page.goto(console.link)
    await page.get_by_role("link", name="New schedule").click()
    await page.get_by_label("Name", exact=True).fill("nightly-export")
    await page.get_by_label("Target URL").fill(accepting.url())
    await page.get_by_label("Time zone").fill(ZONE)
    await page.get_by_label("Cron expression").fill("0 2 * * *")
    await expect(page.get_by_label("Completion timeout (seconds)")).to_be_hidden()
    await page.get_by_label("A run ends").select_option("callback")
    await page.get_by_label("Completion timeout (seconds)").fill("7200")
    await page.get_by_label("Minimum duration (seconds, optional)").fill("3600")
    await page.get_by_role("button", name="Create schedule").click()
    await expect(page.get_by_role("heading", name="nightly-export")).to_be_visible()
    await expect(page.locator("#completion-mode")).to_contain_text("within 7200 s")
    sid = page.url.rsplit("/", 1)[-1]
    async with console.api() as api:
        s = (await api.get(f"/v1/schedules/{sid}")).json()
    assert s["completion"]["mode"] == "callback"
    assert s["completion"]["timeout_seconds"] == 7200
    assert s["completion"]["min_duration_seconds"] == 3600

    await page.get_by_role("button", name="Trigger now").click()
    await expect(page.locator("h1 code")).to_be_visible()  # the run page's heading
    run_id = page.url.rsplit("/", 1)[-1]

    async def accepted() -> bool:
        return len(accepting.accepted) == 1

    await wait_until(accepted, 30, "the target to accept the delivery")
    awaiting = page.locator(".definition .awaiting")
    await expect(awaiting).to_contain_text("accepted, awaiting completion until")
    async with console.api() as api:
        run = (await api.get(f"/v1/schedules/{sid}/runs/{run_id}")).json()
    assert run["status"] == "in_progress"
    deadline = datetime.fromisoformat(run["completion_deadline"])
    shown = await awaiting.locator("time").get_attribute("datetime")
    assert shown is not None
    assert abs((datetime.fromisoformat(shown) - deadline).total_seconds()) < 1
    # In the schedule's zone, with its abbreviation.
    await expect(awaiting.locator("time")).to_have_text(re.compile(r" E[SD]T$"))
    await shoot(page, "run-awaiting-completion")

    url, token = accepting.accepted[0]
    # To the scheduler's own port: the URL names SCHEDULER_PUBLIC_URL, not this test's port.
    async with httpx.AsyncClient(base_url=console.scheduler_url, timeout=10) as anon:
        done = await anon.post(
            urlsplit(url).path,
            headers={"Authorization": f"Bearer {token}"},
            json={
                "status": "succeeded",
                "detail": f"exported {XSS}",
                "output": {"rows": 12, "note": XSS},
            },
        )
    assert done.status_code == 200, done.text
    await expect(page.locator(".definition .badge").first).to_have_text("succeeded")
    await expect(page.locator(".definition .completion-detail")).to_have_text(f"exported {XSS}")
    output = page.locator(".definition pre.completion-output")
    await expect(output).to_contain_text('"rows": 12')
    await expect(output).to_contain_text(f'"note": "{XSS}"')
    # Sooner than its minimum duration (an hour): flagged.
    await expect(page.locator(".definition .too-fast")).to_be_visible()
    await expect(page.locator(".definition .awaiting")).to_have_count(0)
    await shoot(page, "run-completed")
    assert await page.locator("main img").count() == 0
    assert await page.evaluate("window.__xss") is None

    # The runs list says so too; the form shows the mode and switches back to response.
    await page.goto(f"{console.origin}/#/schedules/{sid}")
    await expect(page.locator("td .too-fast")).to_have_count(1)
    await page.get_by_role("link", name="Edit").click()
    await expect(page.get_by_label("A run ends")).to_have_value("callback")
    await expect(page.get_by_label("Completion timeout (seconds)")).to_have_value("7200")
    await page.get_by_label("A run ends").select_option("response")
    await page.get_by_role("button", name="Save changes").click()
    await expect(page.locator("#completion-mode")).to_have_text("when the target answers 2xx")
    async with console.api() as api:
        s = (await api.get(f"/v1/schedules/{sid}")).json()
    assert s["completion"]["mode"] == "response"


async def test_completion_timeout_out_of_range_is_shown_at_its_field(
    console: Console, accepting: Accepting, page: Page
) -> None:
    await page.goto(console.link)
    await page.get_by_role("link", name="New schedule").click()
    await page.get_by_label("Name", exact=True).fill("too-short")
    await page.get_by_label("Target URL").fill(accepting.url())
    await page.get_by_label("A run ends").select_option("callback")
    await page.get_by_label("Completion timeout (seconds)").fill("5")
    await page.get_by_role("button", name="Create schedule").click()
    # The API's 422 names completion.timeout_seconds; the form puts it there.
    await expect(page.locator("#f-completion-timeout-error")).to_be_visible()
    await expect(page.get_by_label("Completion timeout (seconds)")).to_have_attribute(
        "aria-invalid", "true"
    )
