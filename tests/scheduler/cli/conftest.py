"""A real scheduler API for the CLI's end-to-end tests: `scheduler serve --dev --role api` on a
loopback port in a temporary directory (SQLite under ./var), and a dev token minted with the key
it wrote there, exported as SCHEDULER_URL / SCHEDULER_TOKEN for the CLI under test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from authclient import mint_token
from authclient.settings import DEFAULT_AUDIENCE, DEFAULT_ISSUER
from scheduler.config import DEV_AUTH_KEY_FILE, DEV_VAR_DIR
from tests.support.processes import free_port

READY_SECONDS = 30


@dataclass(frozen=True)
class Api:
    url: str
    key: str  # the dev HS256 key the server verifies tokens with
    cwd: Path

    def token(self, tenant: str) -> str:
        return mint_token(
            self.key,
            tenant_id=tenant,
            subject="cli-test",
            scopes=["schedules:read", "schedules:write"],
            ttl_seconds=3600,
            audience=DEFAULT_AUDIENCE,
            issuer=DEFAULT_ISSUER,
        )


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "SCHEDULER_"))}
    env["SCHEDULER_DEFAULT_MAX_SCHEDULES"] = "1000"  # the paging test lists more than 100
    env["WEBHOOK_ALLOW_PRIVATE_NETWORKS"] = "true"  # the README's file targets a loopback receiver
    return env


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    cwd = tmp_path_factory.mktemp("api")
    port = free_port()
    log = (cwd / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduler.entrypoints.cli",
            "serve",
            "--dev",
            "--port",
            str(port),
            "--role",
            "api",
        ],
        cwd=cwd,
        env=_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url, cwd)
        key = (cwd / DEV_VAR_DIR / DEV_AUTH_KEY_FILE).read_text().strip()
        yield Api(url, key, cwd)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        assert "whsec_" not in (cwd / "serve.log").read_text()  # the server never logs a secret


def _wait_ready(proc: subprocess.Popen[bytes], url: str, cwd: Path) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=0.5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, (cwd / "serve.log").read_text()
        time.sleep(0.1)  # polling a child process for readiness, not waiting for time
    pytest.fail(f"the API did not become ready in {READY_SECONDS} s")


@pytest.fixture
def tenant(api: Api, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """A tenant of its own per test, with SCHEDULER_URL and SCHEDULER_TOKEN set for it."""
    name = f"t-{request.node.name}"[:60].replace("[", "-").replace("]", "")
    monkeypatch.setenv("SCHEDULER_URL", api.url)
    monkeypatch.setenv("SCHEDULER_TOKEN", api.token(name))
    return name
