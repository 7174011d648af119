"""Concurrent applies by one tenant take turns (PostgreSQL: each on its own connection, at the
same time): none loses the other's update, a key is created once, and each answer describes
what it found after the other one."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.scheduler.conftest import auth
from tests.scheduler.schedules.apply_support import apply, definition, live

KEYS = [f"k{i}" for i in range(10)]


SIDES = ("a", "b", "c", "d")


@pytest.mark.postgres
async def test_concurrent_applies_serialise(client: httpx.AsyncClient, database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("concurrent writers need PostgreSQL")
    assert (await apply(client, [definition(k) for k in KEYS])).status_code == 200
    for round_ in range(3):  # a few rounds: the interleaving differs between them
        sets = [
            [
                *(definition(k, payload={"by": side, "round": round_}) for k in KEYS),
                definition(f"new-{round_}"),  # the same new key in every one
            ]
            for side in SIDES
        ]
        answers = await asyncio.gather(*(apply(client, s) for s in sets))
        assert [r.status_code for r in answers] == [200] * len(SIDES), [r.text for r in answers]
        bodies = [r.json() for r in answers]
        # One created the new key; every other one found it (equal: unchanged) and found every
        # schedule as the one before it left it, so it updated them all.
        assert sorted(len(b["created"]) for b in bodies) == [0] * (len(SIDES) - 1) + [1]
        for body in bodies:
            if not body["created"]:
                assert [u["key"] for u in body["updated"]] == KEYS
                assert body["unchanged"] == 1
        schedules = await live(client)
        assert len({schedules[k]["payload"]["by"] for k in KEYS}) == 1
        # No lost update: every apply's writes happened, one after the other.
        assert {schedules[k]["version"] for k in KEYS} == {1 + len(SIDES) * (round_ + 1)}


@pytest.mark.postgres
async def test_apply_and_one_at_a_time_creates_of_a_key_do_not_duplicate(
    client: httpx.AsyncClient, database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("concurrent writers need PostgreSQL")
    body = definition("shared")
    applied, created = await asyncio.gather(
        apply(client, [body]),
        client.post("/v1/schedules/", json=body, headers=auth()),
    )
    assert applied.status_code == 200, applied.text
    # Either the create came first (apply finds it unchanged) or apply did (409 key-conflict).
    if created.status_code == 201:
        assert applied.json()["unchanged"] == 1
    else:
        assert created.status_code == 409
        assert applied.json()["created"] == ["shared"]
    assert list(await live(client)) == ["shared"]
