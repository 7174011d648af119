"""A tab separates cron fields as a space does (DESIGN.md §7), in the API as in the CLI; other
control characters stay refused in `cron`."""

from __future__ import annotations

import httpx

from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body

URL = "/v1/schedules/"
PREVIEW = URL + "preview"


async def test_a_tab_separates_cron_fields_like_a_space(client: httpx.AsyncClient) -> None:
    spaced = {"cron": "30 2 * * 1-5", "timezone": "Europe/Paris", "count": 5}
    tabbed = {**spaced, "cron": "30\t2 *\t*\t1-5"}
    answers = [await client.post(PREVIEW, json=body, headers=auth()) for body in (spaced, tabbed)]
    for r in answers:
        assert r.status_code == 200, r.text
    assert answers[0].json() == answers[1].json()
    created = await client.post(
        URL, json=schedule_body(cron=tabbed["cron"], timezone="Europe/Paris"), headers=auth()
    )
    assert created.status_code == 201, created.text
    occurrences_of = await client.get(
        URL + created.json()["id"] + "/occurrences", params={"count": 5}, headers=auth()
    )
    assert occurrences_of.json()["items"] == answers[0].json()["items"]


async def test_other_control_characters_in_cron_are_still_refused(
    client: httpx.AsyncClient,
) -> None:
    for cron in ("30 2 * *\n1-5", "30 2 * * 1-5\r", "30\x002 * * *"):
        r = await client.post(PREVIEW, json={"cron": cron, "timezone": "UTC"}, headers=auth())
        assert r.status_code == 422, (cron, r.text)
        assert r.json()["field"] == "cron", r.json()
