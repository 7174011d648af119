"""A schedule's history in Chromium: a PATCH shows as a version with its author and each changed
field from → to (markup in a changed name stays text, a new secret says only that it changed);
Restore asks, then writes a new version carrying the old definition; a run links to the version
that planned it, whose page shows that definition."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.console.conftest import XSS, Console, Receiver, shoot
from tests.support.processes import wait_until


async def test_history_lists_changes_with_author_and_restore_adds_a_version(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        created = await api.post(
            "/v1/schedules/",
            json={
                "name": "report",
                "cron": "0 3 * * *",
                "timezone": "Europe/Paris",
                "action": "webhook",
                "target": {"url": receiver.url("/ok")},
            },
        )
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        patched = await api.patch(
            f"/v1/schedules/{sid}", json={"name": f"renamed {XSS}", "cron": "30 4 * * *"}
        )
        assert patched.status_code == 200, patched.text
        rotated = await api.post(f"/v1/schedules/{sid}/secret/rotate")
        assert rotated.status_code == 200, rotated.text
        run = (await api.post(f"/v1/schedules/{sid}/trigger")).json()
        versions = (await api.get(f"/v1/schedules/{sid}/versions")).json()["items"]
        # What the page must show, as the API says it.
        assert [v["version"] for v in versions] == [3, 2, 1]
        actor = versions[1]["actor"]
        assert actor not in ("", "system")
    assert run["schedule_version"] == 3

    await page.goto(console.link)
    await page.goto(f"{console.origin}/#/schedules/{sid}")
    rows = page.locator("#history table.versions tbody tr")
    await expect(rows).to_have_count(3)
    v2 = page.locator('#history tr[data-version="2"]')
    await expect(v2.locator("td.actor")).to_have_text(actor)
    await expect(v2).to_contain_text("API call")
    name_change = v2.locator(".changes li", has_text="name")
    await expect(name_change.locator("code.from")).to_have_text('"report"')
    await expect(name_change.locator("code.to")).to_have_text(f'"renamed {XSS}"')
    await expect(v2.locator(".changes li", has_text="cron")).to_contain_text('"0 3 * * *"')
    # The rotation: only that the secret changed, no value of any kind.
    secret = page.locator('#history tr[data-version="3"] .changes li')
    await expect(secret).to_have_text("secret: secret changed")
    await expect(page.locator('#history tr[data-version="1"]')).to_contain_text("created")
    # The current version has no Restore; older ones do.
    await expect(page.locator('#history tr[data-version="3"] button.restore')).to_have_count(0)
    await expect(page.locator('#history tr[data-version="1"] button.restore')).to_have_count(1)
    await shoot(page, "schedule-history")

    # The run links to the version that planned it.
    link = page.locator("a.run-version").first
    await expect(link).to_have_text("v3")
    await link.click()
    await expect(page.get_by_role("heading", name="Version 3")).to_be_visible()
    await expect(page.locator("main pre.code")).to_contain_text('"cron": "30 4 * * *"')
    await page.go_back()

    # Restore v1: asked first, Cancel does nothing, Yes writes version 4 with v1's definition.
    await page.locator('#history tr[data-version="1"] button.restore').click()
    await page.get_by_role("button", name="Cancel").click()
    async with console.api() as api:
        assert (await api.get(f"/v1/schedules/{sid}")).json()["version"] == 3
    await page.locator('#history tr[data-version="1"] button.restore').click()
    await page.get_by_role("button", name="Yes, restore v1").click()
    await expect(page.locator("#flash")).to_have_text("Restored version 1 as version 4.")
    await expect(rows).to_have_count(4)
    v4 = page.locator('#history tr[data-version="4"]')
    await expect(v4.locator(".changes li", has_text="name").locator("code.from")).to_have_text(
        f'"renamed {XSS}"'
    )
    await expect(v4.locator(".changes li", has_text="name").locator("code.to")).to_have_text(
        '"report"'
    )
    await expect(page.get_by_role("heading", name="report")).to_be_visible()

    async def restored() -> bool:
        async with console.api() as api:
            s = (await api.get(f"/v1/schedules/{sid}")).json()
        return bool(s["version"] == 4 and s["name"] == "report" and s["cron"] == "0 3 * * *")

    await wait_until(restored, 10, "the schedule to carry version 1's definition")
    assert await page.locator("main img").count() == 0
    assert await page.evaluate("window.__xss") is None


async def test_long_values_are_cut_with_the_whole_on_hover(console: Console, page: Page) -> None:
    long = "x" * 300
    async with console.api() as api:
        created = await api.post(
            "/v1/schedules/",
            json={"name": "long", "cron": "0 3 * * *", "timezone": "UTC", "action": "event"},
        )
        sid = created.json()["id"]
        r = await api.patch(f"/v1/schedules/{sid}", json={"description": long})
        assert r.status_code == 200, r.text
    await page.goto(console.link)
    await page.goto(f"{console.origin}/#/schedules/{sid}")
    to = page.locator('#history tr[data-version="2"] code.to')
    await expect(to).to_have_class("to truncated")
    text = await to.text_content()
    assert text is not None
    assert len(text) < 80
    assert text.endswith("…")
    assert await to.get_attribute("title") == f'"{long}"'
