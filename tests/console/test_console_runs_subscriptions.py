"""The console's failed runs, subscriptions and unread count, in Chromium: the failed-runs page
shows each run's last error, filters by schedule, trigger and time range, replays a selection
and reports each row; a replay links back to its run (and the run to its replays); a
subscription is edited, disabled, enabled and deleted (with confirmation) and its deliveries
come a page at a time; the header's unread count follows a notification read, and a new one
within the poll interval without navigating."""

from __future__ import annotations

from typing import Any

import httpx
from playwright.async_api import Page, expect

from tests.console.conftest import XSS, Console, Receiver, shoot
from tests.support.processes import wait_until

DELIVERIES = 25  # more than one page of deliveries (20)


async def _failing(api: httpx.AsyncClient, receiver: Receiver, name: str, threshold: int) -> str:
    created = await api.post(
        "/v1/schedules/",
        json={
            "name": name,
            "cron": "0 3 * * *",
            "timezone": "UTC",
            "action": "webhook",
            "target": {"url": receiver.url("/fail")},
            "retry_policy": {"max_attempts": 1},
            "breaker": {"failure_threshold": threshold},
        },
    )
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


async def _until_failed(api: httpx.AsyncClient, sid: str, run_id: str) -> None:
    async def failed() -> bool:
        r = await api.get(f"/v1/schedules/{sid}/runs/{run_id}")
        return bool(r.json()["status"] == "failed")

    await wait_until(failed, 30, f"run {run_id} to fail")


async def test_failed_runs_error_filters_bulk_replay_and_links_back(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        a = await _failing(api, receiver, "alpha", 100)
        b = await _failing(api, receiver, f"beta {XSS}", 100)
        originals: list[tuple[str, str]] = []
        for sid in (a, a, b):
            run = (await api.post(f"/v1/schedules/{sid}/trigger")).json()
            originals.append((sid, run["id"]))
        for sid, rid in originals:
            await _until_failed(api, sid, rid)
        first = originals[0][1]
        replay = (await api.post(f"/v1/schedules/{a}/runs/{first}/replay")).json()
        await _until_failed(api, a, replay["id"])

    await page.goto(console.link)
    await page.get_by_role("link", name="Failed runs").click()
    rows = page.locator("table.failed-runs tbody tr")
    await expect(rows).to_have_count(4)
    # Each row says why: the last attempt's error kind, its HTTP status and message.
    for i in range(4):
        await expect(rows.nth(i).locator(".last-error")).to_contain_text("http_status")
        await expect(rows.nth(i).locator(".last-error")).to_contain_text("HTTP 500")
    # The replay row points at the run it replays.
    replay_row = page.locator("table.failed-runs tbody tr", has=page.locator("a.replay-of"))
    await expect(replay_row).to_have_count(1)
    await expect(replay_row.locator("a.replay-of")).to_have_text(first)
    await shoot(page, "failed-runs")

    # Filters: schedule, trigger, time range; kept in the address.
    await page.get_by_label("Schedule", exact=True).select_option(label=f"beta {XSS}")
    await expect(rows).to_have_count(1)
    assert f"schedule_id={b}" in page.url
    await expect(rows.first).to_contain_text(f"beta {XSS}")
    await page.get_by_role("button", name="Clear filters").click()
    await expect(rows).to_have_count(4)
    await page.get_by_label("Trigger").select_option("replay")
    await expect(rows).to_have_count(1)
    await expect(rows.first.locator("a.replay-of")).to_have_text(first)
    await page.get_by_role("button", name="Clear filters").click()
    await expect(rows).to_have_count(4)
    await page.get_by_label("Scheduled from (UTC)").fill("2099-01-01T00:00")
    await expect(page.get_by_text("No failed runs match these filters.")).to_be_visible()
    assert "from=2099-01-01T00%3A00%3A00Z" in page.url or "from=2099-01-01T00:00:00Z" in page.url
    await page.get_by_role("button", name="Clear filters").click()
    await expect(rows).to_have_count(4)

    # Bulk: select all shown, replay them, each row reports its outcome.
    await page.get_by_label("Select all shown").check()
    await expect(page.locator("#selected-count")).to_have_text("4 selected")
    await page.get_by_role("button", name="Replay 4 selected").click()
    await expect(page.locator("#flash")).to_have_text("Replayed 4 of 4 runs.")
    await expect(page.locator("table.failed-runs td.outcome a", has_text="new run")).to_have_count(
        4
    )
    await shoot(page, "failed-runs-replayed")
    async with console.api() as api:
        replays = (await api.get("/v1/schedules/-/runs?trigger=replay&limit=100")).json()["items"]
    sources = sorted(r["replay_of"] for r in replays if r["id"] != replay["id"])
    assert sources == sorted([rid for _, rid in originals] + [replay["id"]])

    # The first original's replay page says "Replay of", and that run lists its replays.
    await page.goto(f"{console.origin}/#/schedules/{a}/runs/{replay['id']}")
    await expect(page.locator(".definition a.replay-of")).to_have_text(first)
    await page.locator(".definition a.replay-of").click()
    await expect(page.get_by_role("heading", name=f"Run {first}")).to_be_visible()
    await expect(page.locator("#replayed-as a.replayed-as")).to_have_count(2)
    await expect(page.locator("#replayed-as")).to_contain_text(replay["id"])
    await shoot(page, "run-replayed-as")
    assert await page.locator("main img").count() == 0
    assert await page.evaluate("window.__xss") is None


async def test_subscription_edit_disable_delete_and_paged_deliveries(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        sub = await api.post(
            "/v1/subscriptions/",
            json={"url": receiver.url("/events"), "event_types": ["schedule.created"]},
        )
        assert sub.status_code == 201, sub.text
        sub_id = sub.json()["id"]
        for i in range(DELIVERIES):
            r = await api.post(
                "/v1/schedules/",
                json={"name": f"s{i}", "cron": "0 3 * * *", "timezone": "UTC", "action": "event"},
            )
            assert r.status_code == 201, r.text

        async def delivered() -> bool:
            d = (await api.get(f"/v1/subscriptions/{sub_id}/deliveries?limit=100")).json()
            return len(d["items"]) == DELIVERIES

        await wait_until(delivered, 60, f"{DELIVERIES} deliveries")

    await page.goto(console.link)
    await page.get_by_role("link", name="Notifications").click()
    item = page.locator("li.subscription")
    await expect(item).to_have_count(1)

    # Deliveries: a page of 20, then the rest.
    await item.get_by_role("button", name="Deliveries").click()
    deliveries = item.locator("table.deliveries tbody tr")
    await expect(deliveries).to_have_count(20)
    await page.set_viewport_size({"width": 390, "height": 844})
    height = await page.evaluate("document.documentElement.scrollHeight")
    await page.set_viewport_size({"width": 1280, "height": 900})
    await shoot(page, "subscription-deliveries")
    await item.get_by_role("button", name="Load more deliveries").click()
    await expect(deliveries).to_have_count(DELIVERIES)
    await expect(item.get_by_role("button", name="Load more deliveries")).to_be_hidden()
    assert height < 11_552, height  # one page, not the whole history

    # Edit: the API's error at its field, then a valid change.
    await item.get_by_role("button", name="Edit").click()
    form = item.locator("form.edit-subscription")
    await form.get_by_label("Event types (comma-separated)").fill("schedule.rn.faild")
    await form.get_by_role("button", name="Save").click()
    await expect(form.locator("[id$=types-error]")).to_be_visible()
    await form.get_by_label("Event types (comma-separated)").fill("schedule.*")
    await form.get_by_label("Description").fill(f"ops {XSS}")
    await shoot(page, "subscription-edit")
    await form.get_by_role("button", name="Save").click()
    await expect(page.locator("#flash")).to_have_text("Subscription saved.")
    await expect(item).to_contain_text(f"schedule.* — ops {XSS}")
    async with console.api() as api:
        got = (await api.get(f"/v1/subscriptions/{sub_id}")).json()
    assert (got["event_types"], got["description"]) == (["schedule.*"], f"ops {XSS}")

    # Disable, enable.
    await item.get_by_role("button", name="Disable").click()
    await expect(item.locator(".badge").first).to_have_text("disabled")
    async with console.api() as api:
        assert (await api.get(f"/v1/subscriptions/{sub_id}")).json()["enabled"] is False
    await item.get_by_role("button", name="Enable").click()
    await expect(item.locator(".badge").first).to_have_text("enabled")

    # Delete asks first; Cancel keeps it.
    await item.get_by_role("button", name="Delete").click()
    confirm = item.get_by_role("alertdialog")
    await expect(confirm).to_contain_text(receiver.url("/events"))
    await shoot(page, "subscription-delete")
    await confirm.get_by_role("button", name="Cancel").click()
    await expect(confirm).to_have_count(0)
    await item.get_by_role("button", name="Delete").click()
    await item.get_by_role("button", name="Delete subscription").click()
    await expect(page.get_by_text("No subscriptions.")).to_be_visible()
    async with console.api() as api:
        assert (await api.get(f"/v1/subscriptions/{sub_id}")).status_code == 404
    assert await page.locator("main img").count() == 0
    assert await page.evaluate("window.__xss") is None


async def test_header_unread_count_follows_reads_and_new_alerts(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async def alerts(api: httpx.AsyncClient, n: int) -> None:
        async def arrived() -> bool:
            items: list[Any] = (await api.get("/v1/notifications/")).json()["items"]
            return len(items) >= n

        await wait_until(arrived, 30, f"{n} alert(s) in the inbox")

    async with console.api() as api:
        sid = await _failing(api, receiver, "fragile", 1)
        await api.post(f"/v1/schedules/{sid}/trigger")
        await alerts(api, 1)

    await page.clock.install()
    await page.goto(console.link)
    badge = page.locator("#unread")
    await expect(badge).to_have_text("1 unread")
    await page.get_by_role("link", name="Notifications").click()
    await page.locator(".inbox li.unread").get_by_role("button", name="Mark as read").click()
    await expect(page.locator(".inbox li.read")).to_have_count(1)
    # Read here: the header agrees without leaving the page.
    await expect(badge).to_be_hidden()

    # A new alert while the page sits still: the next poll (30 s) shows it.
    async with console.api() as api:
        other = await _failing(api, receiver, "fragile-2", 1)
        await api.post(f"/v1/schedules/{other}/trigger")
        await alerts(api, 2)
    await expect(badge).to_be_hidden()
    await page.clock.run_for(31_000)
    await expect(badge).to_have_text("1 unread")


async def test_bulk_replay_is_bounded_to_one_hundred(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        sid = await _failing(api, receiver, "many", 1000)
        ids = [(await api.post(f"/v1/schedules/{sid}/trigger")).json()["id"] for _ in range(101)]

        async def all_failed() -> bool:
            r = await api.get(f"/v1/schedules/{sid}/runs?status=failed&limit=100")
            first = r.json()
            if first["next_cursor"] is None:
                return False
            rest = await api.get(
                f"/v1/schedules/{sid}/runs?status=failed&limit=100&cursor={first['next_cursor']}"
            )
            return len(first["items"]) + len(rest.json()["items"]) == len(ids)

        await wait_until(all_failed, 120, "101 failed runs")

    await page.goto(console.link)
    await page.get_by_role("link", name="Failed runs").click()
    rows = page.locator("table.failed-runs tbody tr")
    for shown in (50, 100, 101):
        await expect(rows).to_have_count(shown)
        if shown < 101:
            await page.get_by_role("button", name="Load more").click()
    # Ticks the first 100 and says why not the rest (the box then reads "some": indeterminate).
    await page.get_by_label("Select all shown").click()
    await expect(page.locator("#selected-count")).to_have_text("100 selected (at most 100 at once)")
    await expect(page.locator("#flash")).to_contain_text("At most 100 runs")
    await expect(page.locator("table.failed-runs input.pick:checked")).to_have_count(100)
    # The 101st stays unticked, even by hand.
    last = rows.nth(100).locator("input.pick")
    await last.click()
    await expect(last).not_to_be_checked()
    await expect(page.get_by_role("button", name="Replay 100 selected")).to_be_enabled()
