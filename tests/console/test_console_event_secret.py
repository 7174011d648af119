"""An event schedule has no signing secret: its page offers no "Rotate secret" (the API would
answer 409 not-a-webhook), while a webhook schedule's page does. An unknown time zone's field
error shows the API's suggestion, its field named once."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.console.conftest import Console, Receiver, shoot


async def test_rotate_secret_only_for_webhook_schedules(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        ids = {}
        for action, target in (("event", None), ("webhook", {"url": receiver.url("/ok")})):
            created = await api.post(
                "/v1/schedules/",
                json={
                    "name": f"{action}-schedule",
                    "cron": "0 3 * * *",
                    "timezone": "UTC",
                    "action": action,
                    "target": target,
                },
            )
            assert created.status_code == 201, created.text
            ids[action] = created.json()["id"]
        assert created.json()["secret"]

    await page.goto(console.link)
    await page.goto(f"{console.origin}/#/schedules/{ids['event']}")
    await expect(page.get_by_role("heading", name="event-schedule")).to_be_visible()
    await expect(page.get_by_role("button", name="Trigger now")).to_be_visible()
    await expect(page.get_by_role("button", name="Rotate secret")).to_have_count(0)
    await shoot(page, "schedule-event")

    await page.goto(f"{console.origin}/#/schedules/{ids['webhook']}")
    await expect(page.get_by_role("heading", name="webhook-schedule")).to_be_visible()
    await expect(page.get_by_role("button", name="Rotate secret")).to_be_visible()


async def test_the_form_shows_the_zone_the_api_suggests(console: Console, page: Page) -> None:
    await page.goto(console.link)
    await page.get_by_role("link", name="New schedule").click()
    await page.get_by_label("Cron expression").fill("0 3 * * *")
    await page.get_by_label("Time zone").fill("America/NewYork")
    error = page.locator("#f-timezone-error")
    await expect(error).to_contain_text("did you mean America/New_York?")
    await expect(error).not_to_contain_text("timezone:")
    await shoot(page, "form-zone-suggestion")
