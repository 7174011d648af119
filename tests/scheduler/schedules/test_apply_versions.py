"""Apply writes versions like every other change (DESIGN.md §7b "Versions"): source `apply`,
the token's subject as actor, the changed fields; an unchanged re-apply writes none."""

from __future__ import annotations

from typing import Any

import httpx

from scheduler.bootstrap import Container
from tests.scheduler.schedules.apply_support import APPLY, definition, live, state
from tests.scheduler.schedules.test_versions_api import as_user, versions


async def _apply(client: httpx.AsyncClient, body: dict[str, Any], subject: str) -> None:
    r = await client.post(APPLY, json=body, headers=as_user(subject))
    assert r.status_code == 200, r.text


async def test_apply_versions_name_apply_and_the_subject(
    client: httpx.AsyncClient, container: Container
) -> None:
    labels = {"team": "ops"}
    first = [definition("a", labels=labels), definition("b", labels=labels)]
    await _apply(client, {"schedules": first}, "deployer")
    ids = {k: s["id"] for k, s in (await live(client)).items()}
    before = await state(container)
    await _apply(client, {"schedules": first}, "deployer")
    assert await state(container) == before  # unchanged: no version either

    changed = [definition("a", labels=labels, cron="0 4 * * *")]
    await _apply(client, {"schedules": changed, "prune": {"labels": labels}}, "ci-bot")

    a = (await versions(client, ids["a"]))["items"]
    assert [(i["version"], i["actor"], i["source"]) for i in a] == [
        (2, "ci-bot", "apply"),
        (1, "deployer", "apply"),
    ]
    assert [c["field"] for c in a[0]["changes"]] == ["cron"]
    assert a[0]["changes"][0]["to"] == "0 4 * * *"
    b = (await versions(client, ids["b"]))["items"]
    assert (b[0]["actor"], b[0]["source"]) == ("ci-bot", "apply")
    detail = await client.get(
        f"/v1/schedules/{ids['b']}/versions/{b[0]['version']}", headers=as_user("x")
    )
    assert detail.json()["state"] == "deleted"  # the prune is a version of its own
