"""The console shows the right runs: an every-minute schedule (runs planned up to a minute ahead)
shows its last finished run as last and the next minute as next, in the list and on its page;
a schedule its breaker paused says why (the failing run, its error and response excerpt) with
Resume, and lists no upcoming occurrence while paused."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from playwright.async_api import Page, expect

from tests.console.conftest import XSS, Console, Receiver, shoot
from tests.support.processes import wait_until

# The first occurrence of an every-minute schedule is at most a minute away; generous for a
# busy machine.
FIRST_RUN_SECONDS = 120


def _instant(text: str | None) -> datetime:
    assert text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_every_minute_after_a_success_last_is_it_next_is_the_next_minute(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        created = await api.post(
            "/v1/schedules/",
            json={
                "name": "every-minute",
                "cron": "* * * * *",
                "timezone": "UTC",
                "action": "webhook",
                "target": {"url": receiver.url("/ok")},
            },
        )
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        seen: dict[str, Any] = {}

        async def ran() -> bool:
            s = (await api.get(f"/v1/schedules/{sid}")).json()
            seen.update(s)
            last = s["last_run"]
            return bool(last and last["trigger"] == "schedule" and last["status"] == "succeeded")

        await wait_until(ran, FIRST_RUN_SECONDS, "the first scheduled run to succeed")

    await page.goto(console.link)
    row = page.locator("table.schedules tbody tr")
    await expect(row).to_have_count(1)
    await expect(row.locator(".last-run .badge")).to_have_text("succeeded")
    # One answer fills both cells: the next run is the minute after the last one, never the
    # run planned ahead as "last" nor the occurrence after it as "next".
    last_at = _instant(await row.locator(".last-run time").get_attribute("datetime"))
    next_at = _instant(await row.locator(".next-run time").get_attribute("datetime"))
    assert next_at - last_at == timedelta(minutes=1), (last_at, next_at)
    await shoot(page, "schedules-every-minute")

    await row.get_by_role("link", name="every-minute").click()
    await expect(page.get_by_role("heading", name="every-minute")).to_be_visible()
    definition = page.locator(".definition")
    await expect(definition.locator(".last-run .badge")).to_have_text("succeeded")
    last_at = _instant(await definition.locator(".last-run time").get_attribute("datetime"))
    next_cell = definition.locator("dt:text-is('Next run') + dd time")
    next_at = _instant(await next_cell.get_attribute("datetime"))
    assert next_at - last_at == timedelta(minutes=1), (last_at, next_at)


async def test_breaker_paused_page_shows_the_failure_and_resume(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        created = await api.post(
            "/v1/schedules/",
            json={
                "name": "fragile",
                "cron": "0 3 * * *",
                "timezone": "UTC",
                "action": "webhook",
                "target": {"url": receiver.url("/fail")},
                "retry_policy": {"max_attempts": 1},
                "breaker": {"failure_threshold": 1},
            },
        )
        sid = created.json()["id"]
        run = (await api.post(f"/v1/schedules/{sid}/trigger")).json()

        async def paused() -> bool:
            s = (await api.get(f"/v1/schedules/{sid}")).json()
            return bool(s["paused_reason"] == "breaker" and s["last_run"])

        await wait_until(paused, 30, "the breaker to pause the schedule")

        async def alerted() -> bool:
            return bool((await api.get("/v1/notifications/")).json()["items"])

        await wait_until(alerted, 30, "the breaker's alert in the inbox")
        [alert] = (await api.get("/v1/notifications/")).json()["items"]
    # The alert links the console's pages (CONSOLE_PUBLIC_URL: the gateway's origin in
    # `python -m embedded`) and quotes the failure; the curl line stays, on that origin.
    schedule_url = f"{console.origin}/#/schedules/{sid}"
    assert schedule_url in alert["body"]
    assert f"{schedule_url}/runs/{run['id']}" in alert["body"]
    assert f"down {XSS}" in alert["body"]
    assert f"curl -X POST {console.origin}/v1/schedules/{sid}/resume" in alert["body"]

    await page.goto(console.link)
    row = page.locator("table.schedules tbody tr")
    await expect(row.locator(".last-run .badge")).to_have_text("failed")
    await expect(row).to_contain_text("breaker: its run failed")
    await shoot(page, "schedules-breaker")

    # From the inbox, the alert's link opens the schedule's page.
    await page.get_by_role("link", name="Notifications").click()
    await page.locator(".inbox li").get_by_role("link", name=schedule_url, exact=True).click()
    card = page.locator("section.breaker")
    await expect(card.get_by_role("heading", name="Paused by its breaker")).to_be_visible()
    await expect(card).to_contain_text("Its last run failed")
    await expect(card).to_contain_text("500")
    await expect(card).to_contain_text("http_status")
    await expect(card.locator("pre.excerpt")).to_have_text(f"down {XSS}")
    assert await page.locator("main img").count() == 0  # the excerpt is text
    await expect(card.get_by_role("link").first).to_have_attribute(
        "href", f"#/schedules/{sid}/runs/{run['id']}"
    )
    await expect(page.locator(".occurrences li")).to_have_count(0)
    await expect(page.get_by_text("None while paused.")).to_be_visible()
    await expect(page.get_by_role("button", name="Resume")).to_have_count(1)
    await shoot(page, "schedule-breaker")

    await card.get_by_role("button", name="Resume").click()
    await expect(page.locator("h1 .badge")).to_have_text("active")
    await expect(page.locator("section.breaker")).to_have_count(0)
    await expect(page.locator(".occurrences li")).to_have_count(10)
