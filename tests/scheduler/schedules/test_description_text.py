"""One rule for descriptions in both services: tab and newline allowed, other control
characters refused with a 422 naming the field; the OpenAPI pattern says the same."""

from __future__ import annotations

import httpx
import pytest

from notification.entrypoints.api.schemas import SubscriptionIn
from scheduler.entrypoints.api.schemas import ScheduleCreate
from servicekit.text import MULTILINE_PATTERN
from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body

URL = "/v1/schedules/"


async def test_tab_and_newline_are_kept(client: httpx.AsyncClient) -> None:
    text = "Nightly report\n\tfor the ops team\r\n"
    r = await client.post(URL, json=schedule_body(description=text), headers=auth())
    assert r.status_code == 201, r.text
    assert r.json()["description"] == text
    patched = await client.patch(URL + r.json()["id"], json={"description": "a\nb"}, headers=auth())
    assert patched.status_code == 200, patched.text
    assert patched.json()["description"] == "a\nb"


@pytest.mark.parametrize("bad", ["\x00", "\x07", "\x1b[31m", "\x7f", "\x85"])
async def test_other_control_characters_are_refused(client: httpx.AsyncClient, bad: str) -> None:
    r = await client.post(URL, json=schedule_body(description=f"x{bad}y"), headers=auth())
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "description"


def test_both_services_publish_the_same_rule() -> None:
    for model in (ScheduleCreate, SubscriptionIn):
        field = model.model_json_schema()["properties"]["description"]
        patterns = [s.get("pattern") for s in field.get("anyOf", [field])]
        assert MULTILINE_PATTERN in patterns, (model.__name__, field)
