"""The console end to end in Chromium, through the embedded process's one-origin gateway: sign in
from the banner's link, create a schedule through the form (the API's validation error at its
field first), a DST-flagged live preview, trigger and watch the run succeed, pause and resume, a
failed run replayed from the failed-runs page, a subscription and its delivery; tenant strings
holding markup render as text."""

from __future__ import annotations

import asyncio

import httpx
from playwright.async_api import Page, expect

from console.app import CONTENT_SECURITY_POLICY
from tests.console.conftest import XSS, Console, Receiver, shoot
from tests.support.processes import wait_until


async def test_one_origin_serves_console_and_both_apis_with_strict_headers(
    console: Console,
) -> None:
    async with httpx.AsyncClient(base_url=console.origin, timeout=10) as anon, console.api() as api:
        index = await anon.get("/")
        assert index.status_code == 200
        assert "<main" in index.text
        assert index.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
        assert index.headers["x-content-type-options"] == "nosniff"
        assert index.headers["referrer-policy"] == "no-referrer"
        script = await anon.get("/js/main.js")
        assert script.headers["content-type"].startswith(
            ("text/javascript", "application/javascript")
        )
        # The same paths as the services' own ports, with their own auth.
        assert (await anon.get("/v1/schedules/")).status_code == 401
        assert (await api.get("/v1/schedules/")).status_code == 200
        assert (await api.get("/v1/notifications/")).status_code == 200
        assert (await api.get("/v1/alert-contacts")).status_code == 200
        assert (await anon.get("/nothing-here")).status_code == 404


async def test_create_preview_trigger_pause_resume(
    console: Console, receiver: Receiver, page: Page
) -> None:
    await page.goto(console.link)
    await expect(page.get_by_role("heading", name="Schedules")).to_be_visible()
    # The token left the address bar for this tab's sessionStorage, never localStorage.
    assert "token" not in page.url
    assert await page.evaluate("sessionStorage.getItem('console.token')") == console.token
    assert await page.evaluate("localStorage.length") == 0
    await expect(page.get_by_text("No schedules yet.")).to_be_visible()
    await shoot(page, "schedules-empty")

    await page.get_by_role("link", name="New schedule").click()
    await page.get_by_label("Name", exact=True).fill("nightly-report")
    await page.get_by_label("Target URL").fill(receiver.url("/ok"))
    await page.get_by_label("Time zone").fill("America/New_York")
    await page.get_by_label("Cron expression").fill("61 2 * * *")
    await page.get_by_role("button", name="Create schedule").click()
    # The API's 422 names `cron`; the message sits at that field, the page stays.
    cron_error = page.locator("#f-cron-error")
    await expect(cron_error).to_be_visible()
    await expect(cron_error).not_to_be_empty()
    assert await page.locator("#f-cron").get_attribute("aria-invalid") == "true"

    # 02:30 does not exist in New York on 2027-03-14 (spring forward): the preview flags it.
    await page.get_by_label("Cron expression").fill("30 2 * * *")
    await page.get_by_label("Preview from (date, UTC)").fill("2027-03-13")
    shifted = page.locator("#preview li", has_text="Mar 14, 2027, 03:00:00 EDT")
    await expect(shifted).to_contain_text("DST: shifted")
    await expect(page.locator("#preview li").first).to_contain_text("Mar 13, 2027, 02:30:00 EST")
    assert await shifted.locator("time").get_attribute("title") == "UTC 2027-03-14T07:00:00Z"
    await expect(cron_error).to_be_hidden()
    await shoot(page, "form")

    await page.get_by_role("button", name="Create schedule").click()
    await expect(page.get_by_role("heading", name="nightly-report")).to_be_visible()
    secret = await page.locator("#secret-value").input_value()
    assert secret.startswith("whsec_")
    await expect(page.locator(".occurrences li")).to_have_count(10)
    await shoot(page, "schedule")

    await page.get_by_role("button", name="Trigger now").click()
    await expect(page.locator("h1", has_text="Run run_")).to_be_visible()
    await expect(page.locator(".definition .badge")).to_have_text("succeeded", timeout=30_000)
    attempt = page.locator("table.attempts tbody tr")
    await expect(attempt).to_have_count(1)
    await expect(attempt.locator("td").nth(2)).to_have_text("200")
    await shoot(page, "run")

    await page.get_by_role("link", name="nightly-report").click()
    await page.get_by_label("Pause reason").fill("maintenance")
    await page.get_by_role("button", name="Pause").click()
    await expect(page.locator("h1 .badge")).to_have_text("paused")
    await expect(page.locator(".definition")).to_contain_text("paused — maintenance")
    await page.get_by_role("button", name="Resume").click()
    await expect(page.locator("h1 .badge")).to_have_text("active")
    await expect(page.locator(".runs-card tbody tr, table tbody tr").first).to_be_visible()

    await page.get_by_role("link", name="Schedules").click()
    row = page.locator("table.schedules tbody tr")
    await expect(row).to_have_count(1)
    await expect(row.locator(".last-run .badge")).to_have_text("succeeded")
    await expect(row).to_contain_text("every day at 02:30")
    await shoot(page, "schedules")

    # Edit (PATCH with the ETag), then delete behind its confirmation, by keyboard.
    await row.get_by_role("link", name="nightly-report").click()
    await page.get_by_role("link", name="Edit").click()
    await page.get_by_label("Name", exact=True).fill("nightly-report-v2")
    await page.get_by_role("button", name="Save changes").click()
    await expect(page.get_by_role("heading", name="nightly-report-v2")).to_be_visible()
    await page.get_by_role("button", name="Delete…").focus()
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("button", name="Yes, delete")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.get_by_text("Deleted “nightly-report-v2”.")).to_be_visible()
    await expect(page.get_by_text("No schedules yet.")).to_be_visible()


async def test_failed_run_replayed_and_markup_stays_text(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        created = await api.post(
            "/v1/schedules/",
            json={
                "name": XSS,
                "cron": "0 3 * * *",
                "timezone": "Africa/Addis_Ababa",
                "action": "webhook",
                "target": {"url": receiver.url("/fail")},
                "retry_policy": {"max_attempts": 1},
                "breaker": {"failure_threshold": 100},
            },
        )
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        run = (await api.post(f"/v1/schedules/{sid}/trigger")).json()

        async def failed() -> bool:
            r = await api.get(f"/v1/schedules/{sid}/runs/{run['id']}")
            return bool(r.json()["status"] == "failed")

        await wait_until(failed, 30, "the run to fail")

    await page.goto(console.link)
    await expect(page.locator("table.schedules a.name")).to_have_text(XSS)
    await page.get_by_role("link", name="Failed runs").click()
    row = page.locator("tbody tr", has_text=XSS)
    await expect(row).to_have_count(1)
    await shoot(page, "failed")
    await row.get_by_role("button", name="Replay").click()
    await expect(row).to_contain_text("Replayed")
    await row.get_by_role("link", name="new run").click()
    await expect(page.locator(".definition")).to_contain_text("replay")
    await expect(page.locator(".definition .badge")).to_have_text("failed", timeout=30_000)
    excerpt = page.locator("table.attempts pre.excerpt")
    await expect(excerpt).to_have_text(f"down {XSS}")
    await expect(page.locator("table.attempts")).to_contain_text("http_status")
    await shoot(page, "run-failed")
    # Rendered as text everywhere: no element came out of the tenant's strings, nothing ran.
    assert await page.locator("main img").count() == 0
    assert await page.evaluate("window.__xss") is None
    await page.get_by_role("link", name=XSS).click()
    await expect(page.get_by_role("heading", name=XSS)).to_be_visible()
    assert await page.locator("main img").count() == 0
    assert await page.evaluate("window.__xss") is None


async def test_breaker_alert_in_the_inbox_with_unread_count(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        created = await api.post(
            "/v1/schedules/",
            json={
                "name": f"fragile {XSS}",
                "cron": "0 3 * * *",
                "timezone": "UTC",
                "action": "webhook",
                "target": {"url": receiver.url("/fail")},
                "retry_policy": {"max_attempts": 1},
                "breaker": {"failure_threshold": 1},
            },
        )
        sid = created.json()["id"]
        await api.post(f"/v1/schedules/{sid}/trigger")

        async def alerted() -> bool:
            return bool((await api.get("/v1/notifications/")).json()["items"])

        await wait_until(alerted, 30, "the breaker's alert in the inbox")

    await page.goto(console.link)
    row = page.locator("table.schedules tbody tr")
    await expect(row.locator(".badge").first).to_have_text("paused")
    await expect(page.locator("#unread")).to_have_text("1 unread")
    await page.get_by_role("link", name="Notifications").click()
    item = page.locator(".inbox li.unread")
    await expect(item).to_have_count(1)
    await expect(item).to_contain_text(f"fragile {XSS}")
    await shoot(page, "inbox")
    assert await page.locator("main img").count() == 0
    await item.get_by_role("button", name="Mark as read").click()
    await expect(page.locator(".inbox li.read")).to_have_count(1)
    await expect(page.locator("#unread-count")).to_have_text("0 unread")
    assert await page.evaluate("window.__xss") is None


async def test_subscribe_and_see_a_delivery(
    console: Console, receiver: Receiver, page: Page
) -> None:
    # Without the link's token the API answers 401 and the console asks for one.
    await page.goto(console.origin + "/")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await page.get_by_label("Bearer token").fill(console.token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Schedules")).to_be_visible()
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    await page.get_by_role("link", name="Notifications").click()
    await expect(page.get_by_text("Nothing yet.")).to_be_visible()
    await page.get_by_label("Endpoint URL").fill(receiver.url("/events"))
    await page.get_by_label("Event types (comma-separated)").fill("schedule.rn.faild")
    await page.get_by_role("button", name="Subscribe").click()
    await expect(page.locator("#sub-types-error")).to_be_visible()  # the API's 422, at its field
    await page.get_by_label("Event types (comma-separated)").fill("schedule.*")
    await page.get_by_role("button", name="Subscribe").click()
    assert (await page.locator("#secret-value").input_value()).startswith("whsec_")

    async with console.api() as api:
        r = await api.post(
            "/v1/schedules/",
            json={"name": "hello", "cron": "*/5 * * * *", "timezone": "UTC", "action": "event"},
        )
        assert r.status_code == 201

    async def delivered() -> bool:
        return any(e.get("type") == "schedule.created" for e in receiver.events)

    await wait_until(delivered, 30, "schedule.created at the subscriber")
    for _ in range(30):  # the delivery row is written before the receiver answers; read it back
        await page.get_by_role("button", name="Deliveries").click()
        row = page.locator("table.deliveries tbody tr", has_text="schedule.created")
        if await row.count() and "succeeded" in (await row.first.inner_text()):
            break
        await asyncio.sleep(0.5)
    await expect(row.first.locator(".badge")).to_have_text("succeeded")
    await shoot(page, "notifications")
