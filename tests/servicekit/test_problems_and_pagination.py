"""problem+json rendering and cursor round trips, through a real FastAPI app (in-process ASGI)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest
from fastapi import FastAPI, HTTPException
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from servicekit.data.pagination import (
    InvalidCursor,
    decode_cursor,
    encode_cursor,
    parse_cursor,
    split_page,
)
from servicekit.http.problems import PROBLEM_MEDIA_TYPE, ProblemError, install_problem_handlers


class Body(BaseModel):
    url: str
    count: int


def make_app() -> FastAPI:
    app = FastAPI()
    install_problem_handlers(app)

    @app.post("/things")
    async def create(body: Body) -> dict[str, int]:
        return {"count": body.count}

    @app.get("/boom")
    async def boom() -> None:
        raise HTTPException(409, "already there")

    @app.get("/cursor")
    async def cursor(c: str) -> dict[str, str]:
        return {"id": decode_cursor(c).id}

    return app


async def request(method: str, path: str, **kw: object) -> httpx.Response:
    transport = httpx.ASGITransport(app=make_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        return await client.request(method, path, **kw)  # type: ignore[arg-type]


async def test_validation_error_names_the_field() -> None:
    resp = await request("POST", "/things", json={"url": "x", "count": "many"})
    assert resp.status_code == 422
    assert resp.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    body = resp.json()
    assert body["type"] == "https://scheduler-platform.dev/problems/validation-error"
    assert body["field"] == "count"
    assert body["errors"] == [{"field": "count", "detail": body["errors"][0]["detail"]}]
    assert "integer" in body["errors"][0]["detail"]
    assert body["status"] == 422


async def test_http_exception_becomes_problem() -> None:
    resp = await request("GET", "/boom")
    assert resp.status_code == 409
    assert resp.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    assert resp.json() == {
        "type": "https://scheduler-platform.dev/problems/conflict",
        "title": "Conflict",
        "status": 409,
        "detail": "already there",
        "instance": "/boom",
    }


async def test_unknown_route_is_problem_404() -> None:
    resp = await request("GET", "/nope")
    assert resp.status_code == 404
    assert resp.json()["type"] == "https://scheduler-platform.dev/problems/not-found"


async def test_cursor_round_trip_and_tamper_is_400() -> None:
    good = encode_cursor(datetime(2026, 1, 1, tzinfo=UTC), "sub_1")
    assert (await request("GET", "/cursor", params={"c": good})).json() == {"id": "sub_1"}
    for bad in [good[:-3], "!!!", base64.urlsafe_b64encode(b'{"t":1,"i":"x"}').decode(), "e30"]:
        resp = await request("GET", "/cursor", params={"c": bad})
        assert resp.status_code == 400, bad
        assert resp.json()["type"] == "https://scheduler-platform.dev/problems/invalid-cursor"


@settings(max_examples=50)
@given(
    when=st.datetimes(
        min_value=datetime(1970, 1, 1),
        max_value=datetime(8999, 12, 31, 23, 59, 59, 999999),
        timezones=st.just(UTC),
    ),
    ident=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=64),
)
def test_cursor_encodes_any_key(when: datetime, ident: str) -> None:
    decoded = decode_cursor(encode_cursor(when, ident))
    assert (decoded.created_at, decoded.id) == (when, ident)


@pytest.mark.parametrize(
    ("when", "ident"),
    [
        (datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC), "sch_1"),  # before the range
        (datetime(9000, 1, 1, tzinfo=UTC), "sch_1"),  # after it
        (datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-1))), "sch_1"),
        (datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))), "sch_1"),
        (datetime(2026, 1, 1, tzinfo=UTC), "sch_\x00"),
        (datetime(2026, 1, 1, tzinfo=UTC), "sch_\ud800"),
        (datetime(2026, 1, 1, tzinfo=UTC), "sch_\x85"),
        (datetime(2026, 1, 1, tzinfo=UTC), "sch_é"),
        (datetime(2026, 1, 1, tzinfo=UTC), "s" * 65),
    ],
)
def test_cursor_outside_what_a_query_can_take_is_invalid(when: datetime, ident: str) -> None:
    """Forged: keys the codec would write but no list returns, refused before any query."""
    raw = json.dumps({"t": when.isoformat(), "i": ident})
    forged = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
    with pytest.raises(InvalidCursor):
        parse_cursor(forged)


def test_split_page_cursor_points_after_last_item() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [(t0 + timedelta(seconds=i), f"id{i}") for i in range(4)]
    page, cursor = split_page(rows, 3, key=lambda r: r)
    assert page == rows[:3]
    assert cursor is not None
    assert decode_cursor(cursor).id == "id2"
    assert split_page(rows[:3], 3, key=lambda r: r) == (rows[:3], None)


def test_problem_error_carries_extra() -> None:
    err = ProblemError(400, "bad", "nope", extra={"field": "x"})
    assert (err.status, err.title, err.extra) == (400, "Bad Request", {"field": "x"})


@pytest.mark.parametrize("limit", [1, 2])
def test_split_page_small_limits(limit: int) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [(t0, "a"), (t0, "b"), (t0, "c")]
    page, cursor = split_page(rows, limit, key=lambda r: r)
    assert len(page) == limit
    assert cursor is not None
