"""Labels and key in the console (DESIGN.md §7b): labels show as chips on the list and filter it
through `?label=`; a schedule's page shows its key and labels; the form sets labels (key=value
lines) and, on create only, the key."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.console.conftest import Console, shoot


async def test_labels_filter_the_list_and_the_key_is_shown(console: Console, page: Page) -> None:
    async with console.api() as api:
        ids = {}
        for name, labels, key in (
            ("billing-nightly", {"team": "billing", "env": "prod"}, "billing/nightly"),
            ("search-hourly", {"team": "search"}, None),
        ):
            body = {"name": name, "cron": "0 3 * * *", "timezone": "UTC", "action": "event"}
            body |= {"labels": labels} | ({"key": key} if key else {})
            created = await api.post("/v1/schedules/", json=body)
            assert created.status_code == 201, created.text
            ids[name] = created.json()["id"]

    await page.goto(console.link)
    await page.goto(f"{console.origin}/#/schedules")
    rows = page.locator("table.schedules tbody tr")
    await expect(rows).to_have_count(2)
    await expect(page.locator("tr", has_text="billing-nightly").locator(".chip")).to_have_text(
        ["team=billing", "env=prod"]
    )
    await page.get_by_label("Labels").fill("team=billing env")
    await page.get_by_label("Labels").press("Enter")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("billing-nightly")
    assert "label=team%3Dbilling+env" in page.url or "label=team%3Dbilling%20env" in page.url
    await shoot(page, "schedules-label-filter")

    await page.get_by_label("Labels").fill("team=nobody")
    await page.get_by_label("Labels").press("Enter")
    await expect(page.get_by_text("No schedule matches these filters.")).to_be_visible()

    await page.goto(f"{console.origin}/#/schedules/{ids['billing-nightly']}")
    await expect(page.locator("#schedule-key")).to_have_text("billing/nightly")
    await expect(page.locator(".chip")).to_have_text(["team=billing", "env=prod"])


async def test_the_form_sets_labels_and_key(console: Console, page: Page) -> None:
    await page.goto(console.link)
    await page.get_by_role("link", name="New schedule").click()
    await page.get_by_label("Name", exact=True).fill("from-the-form")
    await page.get_by_label("Action").select_option("event")
    await page.get_by_label("Cron expression").fill("0 3 * * *")
    await page.get_by_label("Time zone").fill("UTC")
    await page.get_by_label("Key").fill("ops/from-form")
    await page.get_by_label("Labels").fill("team=ops\nenv=dev")
    await page.get_by_role("button", name="Create schedule").click()
    await expect(page.locator("#schedule-key")).to_have_text("ops/from-form")
    await expect(page.locator(".chip")).to_have_text(["team=ops", "env=dev"])

    await page.get_by_role("link", name="Edit").click()
    await expect(page.get_by_label("Key")).to_be_disabled()
    await page.get_by_label("Labels").fill("team=ops")
    await page.get_by_role("button", name="Save changes").click()
    await expect(page.locator(".chip")).to_have_text(["team=ops"])
    await shoot(page, "schedule-labels-key")
