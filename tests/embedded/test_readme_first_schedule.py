"""The README's first schedule, as written, against a real `python -m embedded`: its shell block
runs in bash (curl and all, only the ports and the token put in) beside its `recv.py`, and the run
it fires is delivered, verified by that receiver and recorded as succeeded. The receiver refuses a
delivery signed with another secret, so "ok" means the signature was checked."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import webhookdeliver as wd
from tests.embedded.test_embedded import Embedded, embedded  # noqa: F401  (the fixture)
from tests.support.processes import free_port, wait_until

README = Path(__file__).resolve().parents[2] / "README.md"
RUN_SECONDS = 30.0  # from the trigger to the recorded success, on a loaded machine
README_RECEIVER_PORT = "9999"


def block(language: str, marker: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"expected one README {language} block with {marker!r}"
    return found[0]


@pytest.fixture
def process_groups() -> Iterator[list[int]]:
    """Process groups this test starts (bash and the receiver it leaves running), ended after."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(pgid, signal.SIGTERM)


async def test_the_readme_first_schedule_is_delivered_and_verified(
    embedded: Embedded,  # noqa: F811
    process_groups: list[int],
) -> None:
    port = str(free_port())
    cwd = embedded.cwd / "tenant"
    cwd.mkdir()
    (cwd / "recv.py").write_text(block("python", "HTTPServer(").replace(README_RECEIVER_PORT, port))
    script = block("sh", "tee first.json")
    assert "export TOKEN=…" in script
    script = (
        script.replace("export TOKEN=…", f"export TOKEN={embedded.token}")
        .replace("localhost:8089", embedded.scheduler.removeprefix("http://"))
        .replace(".venv/bin/python", sys.executable)
        .replace(README_RECEIVER_PORT, port)
    )
    with (cwd / "out.txt").open("wb") as out:
        bash = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        process_groups.append(bash.pid)
        assert bash.wait(timeout=RUN_SECONDS) == 0, (cwd / "out.txt").read_text()

    schedule = json.loads((cwd / "first.json").read_text())
    assert schedule["id"].startswith("sch_")
    assert schedule["secret"].startswith("whsec_")
    headers = {"Authorization": f"Bearer {embedded.token}"}
    runs_url = f"{embedded.scheduler}/v1/schedules/{schedule['id']}/runs"
    async with httpx.AsyncClient(headers=headers, timeout=10) as http:

        async def succeeded() -> bool:
            items = (await http.get(runs_url, params={"trigger": "manual"})).json()["items"]
            return bool(items) and items[0]["status"] == "succeeded"

        await wait_until(succeeded, RUN_SECONDS, "the triggered run to succeed")
        run = (await http.get(runs_url, params={"trigger": "manual"})).json()["items"][0]

    printed = (cwd / "out.txt").read_text()
    assert f"{run['id']} attempt 1 ok" in printed, printed

    # The receiver checks: another secret is refused, the schedule's own accepted.
    url = f"http://127.0.0.1:{port}/hook"
    async with wd.Deliverer(allow_private_networks=True) as deliverer:
        for secret, status in ((wd.generate_secret(), 401), (schedule["secret"], 200)):
            result = await deliverer.deliver(
                wd.Delivery(
                    url=url,
                    body=b'{"hello":"world"}',
                    secrets=[secret],
                    webhook_id="run_01JREADMEFIRST000000000000",
                    event_type="schedule.triggered",
                    attempt=1,
                )
            )
            assert result.status_code == status, result.error_message
