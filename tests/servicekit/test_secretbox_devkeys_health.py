"""Secret box rotation and tamper detection, which stored secrets a rotated row signs with, dev key
files, and the health router."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter

from servicekit.data.secretbox import SecretBox, SecretBoxError, generate_key, in_force, parse_key
from servicekit.devkeys import load_or_create_key
from servicekit.http.health import health_router


def test_round_trip_and_rotation() -> None:
    old, new = generate_key(), generate_key()
    token = SecretBox(old).encrypt("whsec_abc", aad=b"sub_1")
    rotated = SecretBox(new, previous=[old])
    assert rotated.decrypt(token, aad=b"sub_1") == "whsec_abc"
    # Once the old key is removed, its tokens no longer decrypt.
    with pytest.raises(SecretBoxError, match="no configured key"):
        SecretBox(new).decrypt(token, aad=b"sub_1")


def test_tamper_and_wrong_aad_are_refused() -> None:
    box = SecretBox(generate_key())
    token = box.encrypt("secret", aad=b"sub_1")
    assert "secret" not in token
    with pytest.raises(SecretBoxError):
        box.decrypt(token, aad=b"sub_2")
    flipped = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    with pytest.raises(SecretBoxError):
        box.decrypt(flipped, aad=b"sub_1")


def test_bad_key_is_refused() -> None:
    with pytest.raises(SecretBoxError, match="32 bytes"):
        parse_key("c2hvcnQ=")


def test_dev_key_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "var" / "k.key"
    first = load_or_create_key(path)
    assert load_or_create_key(path) == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(parse_key(first)) == 32


def test_dev_key_racing_creators_agree_and_leave_no_temp_files(tmp_path: Path) -> None:
    # Threads start together: every one must return the single key that ended up on disk.
    path = tmp_path / "k.key"
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = set(pool.map(lambda _: load_or_create_key(path), range(16)))
    assert keys == {path.read_text().strip()}
    assert [p.name for p in tmp_path.iterdir()] == ["k.key"]


def test_empty_dev_key_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    path.write_text("")
    with pytest.raises(ValueError, match="is empty"):
        load_or_create_key(path)
    assert path.read_text() == ""  # never silently replaced: data under the old key would be lost


async def test_health_router() -> None:
    ready = {"value": True}

    async def readiness() -> bool:
        return ready["value"]

    registry = CollectorRegistry()
    Counter("servicekit_test_total", "test", registry=registry).inc()
    app = FastAPI()
    app.include_router(health_router(readiness, registry))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).status_code == 200
        ready["value"] = False
        not_ready = await client.get("/readyz")
        assert not_ready.status_code == 503
        assert not_ready.headers["content-type"].startswith("application/problem+json")
        metrics = await client.get("/metrics")
        assert "servicekit_test_total 1.0" in metrics.text


def test_a_rotated_rows_previous_secret_signs_until_its_grace_ends_exclusive() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    second = timedelta(seconds=1)
    assert in_force("cur", "old", now + second, now) == ("cur", "old")  # current first
    assert in_force("cur", "old", now, now) == ("cur",)  # the grace ends at its instant
    assert in_force("cur", "old", now - second, now) == ("cur",)
    assert in_force("cur", None, now + second, now) == ("cur",)
    assert in_force("cur", "old", None, now) == ("cur",)  # no expiry: never kept
