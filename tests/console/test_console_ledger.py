"""The ledger page in Chromium (DESIGN.md §7b "Ledger").

Against the real API: a minutely schedule's occurrences appear as cells whose labels say time,
outcome and reason, a cell with a run opens it, and a manual run is listed among the other runs.

Dense windows: no test can make a week of minutely history in the real service quickly, so two
tests answer the ledger route from the browser's side (Playwright's `route`) with pages in the
API's shape, everything else being the real stack: a week of `* * * * *` (10,080 occurrences,
11 pages) is fetched page by page and drawn on one canvas, with the missing ones as an alert and
a list, hovering names an occurrence and a click opens its (real) run; an endless cursor stops
at the console's cap with a message.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

from playwright.async_api import Page, Route, expect

from tests.console.conftest import Console, shoot
from tests.support.processes import wait_until

WEEK_MINUTES = 7 * 24 * 60
PAGE = 1000
MISSING_AT = (100, 5000, 9000)
FAILED_AT = (2000, 2001)
PAUSED = range(3000, 3060)


async def _schedule(console: Console, cron: str, zone: str = "UTC") -> str:
    async with console.api() as api:
        r = await api.post(
            "/v1/schedules/",
            json={"name": "ledger", "cron": cron, "timezone": zone, "action": "event"},
        )
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def _z(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _summary(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The first page's `summary`, in the API's shape."""
    outcomes: dict[str, int] = {}
    not_planned: dict[str, int] = {}
    for i in items:
        outcomes[i["outcome"]] = outcomes.get(i["outcome"], 0) + 1
        if i["outcome"] == "not_planned":
            not_planned[i["reason"]] = not_planned.get(i["reason"], 0) + 1
    reasons = {"skipped": {}, "not_planned": not_planned}
    return {"total": len(items), "outcomes": outcomes, "reasons": reasons}


def _week(start: datetime, run_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(WEEK_MINUTES):
        at = _z(start + timedelta(minutes=i))
        item: dict[str, Any] = {"scheduled_for": at, "version": 1, "outcome": "succeeded"}
        if i in MISSING_AT:
            item["outcome"] = "missing"
        elif i in FAILED_AT:
            item.update(outcome="failed", run_id=run_id)
        elif i in PAUSED:
            item.update(outcome="not_planned", reason="paused")
        items.append(item)
    return items


async def test_a_dense_week_pages_onto_one_canvas_with_missing_called_out(
    console: Console, page: Page
) -> None:
    sid = await _schedule(console, "* * * * *")
    async with console.api() as api:
        run = (await api.post(f"/v1/schedules/{sid}/trigger")).json()
    start = datetime(2026, 3, 2, tzinfo=UTC)
    items = _week(start, run["id"])
    requests: list[dict[str, list[str]]] = []

    async def ledger(route: Route) -> None:
        q = parse_qs(urlsplit(route.request.url).query)
        requests.append(q)
        at = int(q.get("cursor", ["0"])[0])
        nxt = at + PAGE if at + PAGE < len(items) else None
        body = {
            "items": items[at : at + PAGE],
            "summary": _summary(items) if at == 0 else None,
            "other_runs": [],
            "other_runs_truncated": False,
            "next_cursor": None if nxt is None else str(nxt),
        }
        await route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    await page.route(re.compile(rf"/v1/schedules/{sid}/ledger\?"), ledger)
    await page.goto(console.link)
    frm, to = _z(start), _z(start + timedelta(days=7))
    await page.goto(f"{console.origin}/#/schedules/{sid}/ledger?from={frm}&to={to}")
    await expect(page.locator("#ledger")).to_have_attribute("data-count", str(WEEK_MINUTES))
    assert len(requests) == 11
    assert requests[0]["from"] == [frm]
    assert all(int(q["limit"][0]) == PAGE for q in requests)
    # One canvas, not ten thousand elements.
    await expect(page.locator(".ledger-canvas")).to_have_count(1)
    assert await page.locator("#ledger .cell").count() == 0
    await expect(page.locator(".ledger-missing")).to_contain_text("3 occurrences are missing")
    await expect(page.locator('.ledger-summary li[data-outcome="not_planned"]')).to_contain_text(
        "not planned: 60 (paused 60)"
    )
    await expect(page.locator('.ledger-summary li[data-outcome="failed"]')).to_contain_text("2")
    await expect(page.locator('.ledger-attention li[data-outcome="missing"]')).to_have_count(3)
    await expect(page.locator('.ledger-attention li[data-outcome="failed"]')).to_have_count(2)
    print(
        "ledger week: fetch",
        await page.locator("#ledger").get_attribute("data-fetch-ms"),
        "ms, render",
        await page.locator("#ledger").get_attribute("data-render-ms"),
        "ms",
    )
    await shoot(page, "ledger-dense")

    # Minute 2000 is day 1 (Mar 3), 09:20 UTC: point at it, then click it.
    canvas = page.locator(".ledger-canvas")
    box = await canvas.bounding_box()
    assert box is not None
    label_w, top, row = 96, 18, 18
    plot_w = box["width"] - label_w - 4
    x = label_w + (9 * 60 + 20) / 1440 * plot_w + 1
    y = top + 1 * row + 7
    await canvas.hover(position={"x": x, "y": y})
    await expect(page.locator("#ledger-hover")).to_contain_text("Mar 03, 2026, 09:2")
    await expect(page.locator("#ledger-hover")).to_contain_text("failed")
    await canvas.click(position={"x": x, "y": y})
    await expect(page.get_by_role("heading", name=f"Run {run['id']}")).to_be_visible()


async def test_an_endless_cursor_stops_at_the_cap_with_a_message(
    console: Console, page: Page
) -> None:
    sid = await _schedule(console, "* * * * *")
    calls = 0

    async def ledger(route: Route) -> None:
        nonlocal calls
        calls += 1
        at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=calls * PAGE)
        body = {
            "items": [
                {
                    "scheduled_for": (at + timedelta(seconds=i)).isoformat(),
                    "version": 1,
                    "outcome": "succeeded",
                }
                for i in range(PAGE)
            ],
            "summary": None
            if calls > 1
            else {
                "total": 999_999,
                "outcomes": {"succeeded": 999_999},
                "reasons": {"skipped": {}, "not_planned": {}},
            },
            "other_runs": [],
            "next_cursor": f"c{calls}",
        }
        await route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    await page.route(re.compile(rf"/v1/schedules/{sid}/ledger\?"), ledger)
    await page.goto(console.link)
    await page.goto(f"{console.origin}/#/schedules/{sid}/ledger")
    await expect(page.locator(".ledger-capped")).to_contain_text(
        "Showing the first 50,000 occurrences"
    )
    assert calls == 50
    # Cut short, the counts are still the whole window's (the API's summary).
    await expect(page.locator(".ledger-summary")).to_contain_text("succeeded: 999,999")


async def test_real_ledger_cells_link_runs_and_list_other_runs(
    console: Console, page: Page
) -> None:
    """Needs the ledger route (branch `ledger`): waits for a minutely schedule's first
    occurrence to be run and settled."""
    sid = await _schedule(console, "* * * * *", zone="Asia/Kolkata")
    async with console.api() as api:
        manual = (await api.post(f"/v1/schedules/{sid}/trigger")).json()
        ledger: dict[str, Any] = {}

        async def settled() -> bool:
            now = datetime.now(UTC)
            r = await api.get(
                f"/v1/schedules/{sid}/ledger",
                params={"from": (now - timedelta(days=1)).isoformat(), "to": now.isoformat()},
            )
            assert r.status_code == 200, r.text
            ledger.update(r.json())
            return any(i["outcome"] == "succeeded" for i in ledger["items"])

        await wait_until(settled, 150, "an occurrence to succeed")
    done = next(i for i in ledger["items"] if i["outcome"] == "succeeded")
    assert manual["id"] in {r["id"] for r in ledger["other_runs"]}

    await page.goto(console.link)
    await page.goto(f"{console.origin}/#/schedules/{sid}")
    await page.locator("#ledger-link").click()
    await expect(page.get_by_role("heading", name="Ledger")).to_be_visible()
    cells = page.locator("#ledger .cell")
    await expect(cells.first).to_be_visible()
    assert await cells.count() >= len(ledger["items"])
    ok = page.locator(f'#ledger a.cell[href$="/runs/{done["run_id"]}"]')
    label = await ok.get_attribute("aria-label")
    assert label is not None
    assert label.endswith(": succeeded")
    assert "UTC+05:30" in label or "IST" in label
    await expect(page.locator("table.other-runs")).to_contain_text("manual")
    await shoot(page, "ledger")
    await ok.click()
    await expect(page.get_by_role("heading", name=f"Run {done['run_id']}")).to_be_visible()
