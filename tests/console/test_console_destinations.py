"""The destinations page in Chromium (DESIGN.md §7b "Flow control"; needs branch `flow`): a
limit set through the form is listed with its live state, edited in place, refused at the
API's bounds, and deleted after a confirmation."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.console.conftest import Console, shoot

DEST = "api.example.com:443"


async def test_set_edit_refuse_and_delete_a_destination_limit(console: Console, page: Page) -> None:
    await page.goto(console.link)
    await page.get_by_role("link", name="Destinations").click()
    await expect(page.get_by_role("heading", name="Destinations", exact=True)).to_be_visible()
    # The form for a new limit (each listed destination has its own form to edit in place; the
    # console's schedules may already list this destination, unconfigured).
    new = page.locator("form.destination-form", has=page.locator("#dest-new-name"))
    await new.get_by_label("Destination (host:port)").fill(DEST)
    await new.get_by_label("Max in flight").fill("4")
    await new.get_by_label("Requests per second").fill("2.5")
    await new.get_by_role("button", name="Set limit").click()
    row = page.locator(f'table.destinations tr[data-destination="{DEST}"]')
    await expect(row).to_contain_text("2.5/s")
    await expect(row.locator("td").nth(1)).to_have_text("4")
    await expect(row.locator("td.held")).to_have_text("not held")
    async with console.api() as api:
        got = (await api.get(f"/v1/destinations/{DEST}")).json()
    assert got["max_in_flight"] == 4
    assert got["per_second"] == 2.5
    await shoot(page, "destinations")

    # Edit in place: no rate limit, 7 in flight.
    await row.get_by_role("button", name="Edit").click()
    await row.get_by_label("Max in flight").fill("7")
    await row.get_by_label("Requests per second").fill("")
    await row.get_by_role("button", name="Save").click()
    await expect(row.locator("td").nth(1)).to_have_text("7")
    await expect(row.locator("td").nth(2)).to_have_text("none")

    # Out of bounds: the API's problem is shown, nothing changes.
    await new.get_by_label("Destination (host:port)").fill(DEST)
    await new.get_by_label("Max in flight").fill("500")
    await new.get_by_role("button", name="Set limit").click()
    await expect(new.locator(".error-box")).to_contain_text("HTTP 422")
    async with console.api() as api:
        assert (await api.get(f"/v1/destinations/{DEST}")).json()["max_in_flight"] == 7

    await row.get_by_role("button", name="Delete…").click()
    await row.get_by_role("button", name="Yes, delete").click()
    await expect(page.locator("#flash")).to_have_text(f"Deleted the limit of {DEST}.")
    async with console.api() as api:
        after = await api.get(f"/v1/destinations/{DEST}")
    assert after.status_code == 404 or after.json().get("max_in_flight") in (10, None)
