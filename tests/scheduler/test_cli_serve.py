"""`scheduler serve --dev`, `scheduler token` and `scheduler migrate` as real processes: dev keys
are generated 0600 under ./var, the API answers on loopback, a token from `scheduler token`
works against it, and production settings refuse to start with one line."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import free_port

BIN = Path(sys.executable).parent
SCHEDULER = str(BIN / "scheduler")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "SCHEDULER_"))}
    env.update(extra)
    return env


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [SCHEDULER, "serve", "--dev", "--port", str(port), "--role", "api"],
        cwd=tmp_path,
        env=_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/readyz", timeout=0.5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)  # polling a child process for readiness, not waiting for time
        else:
            pytest.fail("server did not become ready in 20 s")
        yield base, tmp_path
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        # The server log must never contain a webhook signing secret.
        assert "whsec_" not in (tmp_path / "serve.log").read_text()


def test_dev_serve_token_and_curl_flow(dev_server: tuple[str, Path]) -> None:
    base, cwd = dev_server
    for name in ("scheduler_secret_key", "auth_hs256_key"):
        mode = stat.S_IMODE((cwd / "var" / name).stat().st_mode)
        assert mode == 0o600, (name, oct(mode))
    assert (cwd / "var" / "scheduler.db").exists()
    out = subprocess.run(
        [SCHEDULER, "token", "--tenant", "acme"],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert token.count(".") == 2
    assert "\n" not in token
    h = {"Authorization": f"Bearer {token}"}
    body = {"name": "hello", "cron": "*/5 * * * *", "timezone": "UTC", "action": "event"}
    created = httpx.post(base + "/v1/schedules/", json=body, headers=h, timeout=5)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    assert httpx.post(f"{base}/v1/schedules/{sid}/pause", headers=h).json()["state"] == "paused"
    assert httpx.delete(f"{base}/v1/schedules/{sid}", headers=h).status_code == 204
    assert httpx.get(base + "/v1/schedules/", headers=h).json()["items"] == []


def test_production_start_refuses_without_key(tmp_path: Path) -> None:
    out = subprocess.run(
        [SCHEDULER, "serve", "--port", str(free_port())],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "SCHEDULER_SECRET_KEY" in lines[0]
    assert not (tmp_path / "var").exists()  # nothing generated outside dev mode


def test_token_refuses_without_key(tmp_path: Path) -> None:
    out = subprocess.run(
        [SCHEDULER, "token", "--tenant", "t"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert out.stdout == ""
    assert "AUTH_HS256_KEY" in out.stderr


def test_migrate_applies_head(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"
    out = subprocess.run(
        [SCHEDULER, "migrate"],
        cwd=tmp_path,
        env=_env(SCHEDULER_DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    from scheduler.adapters.db.migrate import head_revision

    assert out.stdout.strip().endswith(f"revision {head_revision()}")
