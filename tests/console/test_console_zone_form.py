"""Times, the form's timing fields and backfill in Chromium: a New York schedule's page shows its
times as EST/EDT (UTC on hover, no raw ISO string) and its run timeline in its zone; a zone Intl
has no abbreviation for shows its offset; the form sets start/end (wall time in the schedule's
zone), max_runs, jitter and a one-shot run_at, previews them and places the API's 422 at the
field; its bounds match the OpenAPI document; a backfill is previewed (dry run) then created."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
from playwright.async_api import Page, expect

from tests.console.conftest import Console, Receiver, shoot

NY = ZoneInfo("America/New_York")
# An ISO 8601 instant as text (what the UI must not show: it lives in `datetime` and `title`).
RAW_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


async def _create(api: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    r = await api.post("/v1/schedules/", json={"action": "webhook", **fields})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_a_new_york_schedule_reads_est_edt_and_its_timeline_is_in_its_zone(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        s = await _create(
            api,
            name="ny-hourly",
            cron="0 * * * *",
            timezone="America/New_York",
            target={"url": receiver.url("/ok")},
        )
        assert (await api.post(f"/v1/schedules/{s['id']}/trigger")).status_code in (200, 201, 202)
        addis = await _create(
            api,
            name="addis",
            cron="0 3 * * *",
            timezone="Africa/Addis_Ababa",
            target={"url": receiver.url("/ok")},
        )

    await page.goto(console.link)
    await page.goto(f"{console.origin}/#/schedules/{s['id']}")
    await expect(page.get_by_role("heading", name="ny-hourly")).to_be_visible()
    await expect(page.locator(".occurrences li")).to_have_count(10)
    for text in await page.locator(".occurrences time").all_inner_texts():
        assert re.fullmatch(r"\w{3} \d{2}, \d{4}, \d{2}:00:00 E[SD]T", text), text
    first = page.locator(".occurrences time").first
    assert (await first.get_attribute("title") or "").startswith("UTC ")
    next_run = page.locator(".definition dt:text-is('Next run') + dd time")
    await expect(next_run).to_have_text(re.compile(r" E[SD]T$"))
    # The timeline's buckets are the zone's hours, labelled so.
    caption = page.locator(".timeline figcaption")
    await expect(caption).to_contain_text("Hours in America/New_York")
    text = await page.locator("main").inner_text()
    assert not RAW_ISO.search(text), RAW_ISO.findall(text)
    assert "GMT" not in text
    await shoot(page, "schedule-new-york")

    # Intl (en-US) has no abbreviation for Addis Ababa: its offset, not "GMT+3".
    await page.goto(f"{console.origin}/#/schedules/{addis['id']}")
    await expect(page.get_by_role("heading", name="addis")).to_be_visible()
    await expect(page.locator(".occurrences time").first).to_have_text(
        re.compile(r", 03:00:00 (EAT|UTC\+03:00)$")
    )


async def test_form_sets_start_end_max_runs_jitter_and_one_shot(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with httpx.AsyncClient(timeout=10) as anon:
        spec = (await anon.get(f"{console.scheduler_url}/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    await page.goto(console.link)
    await page.goto(f"{console.origin}/#/schedules/new")
    # The form's bounds are the API's.
    attempts = page.get_by_label("Max attempts")
    attempts_max = schemas["RetryPolicyIn"]["properties"]["max_attempts"]["maximum"]
    assert float(await attempts.get_attribute("max") or "nan") == attempts_max == 50
    jitter_max = schemas["ScheduleCreate"]["properties"]["jitter_seconds"]["maximum"]
    jitter = page.get_by_label("Jitter (seconds)")
    assert float(await jitter.get_attribute("max") or "nan") == jitter_max

    await page.get_by_label("Name", exact=True).fill("bounded")
    await page.get_by_label("Target URL").fill(receiver.url("/ok"))
    await page.get_by_label("Time zone").fill("America/New_York")
    await page.get_by_label("Cron expression").fill("0 * * * *")
    # A jitter as long as the gap between runs: the API's 422 sits at the jitter field.
    await page.get_by_label("Jitter (seconds)").fill("3600")
    await attempts.fill("50")
    await page.get_by_role("button", name="Create schedule").click()
    jitter_error = page.locator("#f-jitter-error")
    await expect(jitter_error).to_be_visible()
    assert await page.locator("#f-jitter").get_attribute("aria-invalid") == "true"

    # Start and end are wall times in New York (EST in January); max_runs caps the preview.
    await page.get_by_label("Cron expression").fill("0 9 * * *")
    await page.get_by_label("Jitter (seconds)").fill("30")
    await page.get_by_label("Start (optional)").fill("2027-01-10T08:00")
    await page.get_by_label("End (optional)").fill("2027-02-10T08:00")
    await page.get_by_label("Max runs (optional)").fill("3")
    # An end before the start: the API's 422 names end_at, shown at End.
    await page.get_by_label("End (optional)").fill("2027-01-01T08:00")
    await expect(page.locator("#f-end-error")).to_contain_text("after start_at")
    await page.get_by_label("End (optional)").fill("2027-02-10T08:00")
    await expect(page.locator("#f-end-error")).to_be_hidden()
    await expect(page.locator("#f-start-zone")).to_have_text("In America/New_York (EST)")
    await expect(page.locator("#preview li")).to_have_count(3)
    await expect(page.locator("#preview li time").first).to_have_text("Jan 10, 2027, 09:00:00 EST")
    await expect(jitter_error).to_be_hidden()
    await shoot(page, "form-timing")
    await page.get_by_role("button", name="Create schedule").click()
    await expect(page.get_by_role("heading", name="bounded")).to_be_visible()
    sid = page.url.rsplit("/", 1)[-1]
    async with console.api() as api:
        s = (await api.get(f"/v1/schedules/{sid}")).json()
    assert s["start_at"] == "2027-01-10T13:00:00Z"
    assert s["end_at"] == "2027-02-10T13:00:00Z"
    assert (s["max_runs"], s["jitter_seconds"]) == (3, 30)
    assert s["retry_policy"]["max_attempts"] == 50

    # One-shot: run_at instead of cron, 10:00 in New York in July is 14:00 UTC (EDT).
    await page.goto(f"{console.origin}/#/schedules/new")
    await page.get_by_label("Name", exact=True).fill("once")
    await page.get_by_label("Target URL").fill(receiver.url("/ok"))
    await page.get_by_label("Time zone").fill("America/New_York")
    await page.get_by_label("Runs", exact=True).select_option("once")
    await expect(page.get_by_label("Cron expression")).to_be_hidden()
    await page.get_by_label("Run at").fill("2027-07-04T10:00")
    await expect(page.locator("#preview li")).to_have_count(1)
    await expect(page.locator("#preview li time")).to_have_text("Jul 04, 2027, 10:00:00 EDT")
    await page.get_by_role("button", name="Create schedule").click()
    await expect(page.get_by_role("heading", name="once")).to_be_visible()
    await expect(page.locator(".occurrences time")).to_have_text("Jul 04, 2027, 10:00:00 EDT")
    await shoot(page, "schedule-once-edt")
    sid = page.url.rsplit("/", 1)[-1]
    async with console.api() as api:
        s = (await api.get(f"/v1/schedules/{sid}")).json()
    assert (s["run_at"], s["cron"]) == ("2027-07-04T14:00:00Z", None)

    # Its edit form shows the stored instant as New York wall time.
    await page.goto(f"{console.origin}/#/schedules/{sid}/edit")
    await expect(page.get_by_label("Run at")).to_have_value("2027-07-04T10:00")


async def test_backfill_dry_run_then_create(
    console: Console, receiver: Receiver, page: Page
) -> None:
    async with console.api() as api:
        s = await _create(
            api,
            name="backfilled",
            cron="0 * * * *",
            timezone="America/New_York",
            target={"url": receiver.url("/ok")},
        )
    # The last three whole hours before now, typed as New York wall time.
    top = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start, end = top - timedelta(hours=3, minutes=30), top - timedelta(minutes=30)

    def wall(t: datetime) -> str:
        return t.astimezone(NY).strftime("%Y-%m-%dT%H:%M")

    await page.goto(console.link)
    await page.goto(f"{console.origin}/#/schedules/{s['id']}")
    await page.get_by_label("From (after)").fill(wall(start))
    await page.get_by_label("To (up to)").fill(wall(end))
    await page.get_by_role("button", name="Preview (dry run)").click()
    items = page.locator("#bf-result .occurrences li")
    await expect(items).to_have_count(3)
    await expect(items.first.locator("time")).to_have_text(re.compile(r" E[SD]T$"))
    await expect(page.locator("#bf-create")).to_have_text("Create 3 runs")
    async with console.api() as api:
        runs = (await api.get(f"/v1/schedules/{s['id']}/runs?trigger=backfill")).json()
    assert runs["items"] == []  # a dry run creates nothing
    await page.locator("#bf-result").scroll_into_view_if_needed()
    await shoot(page, "backfill-dry-run")

    await page.locator("#bf-create").click()
    await expect(page.locator("#bf-result")).to_contain_text("Created 3 runs")
    async with console.api() as api:
        runs = (await api.get(f"/v1/schedules/{s['id']}/runs?trigger=backfill")).json()
    assert len(runs["items"]) == 3
