"""Each Deployment's command line, run as the pod runs it: the console script with the manifest's
arguments and its ConfigMap environment (on loopback, a free port, `--dev` keys and SQLite instead
of the Secrets and PostgreSQL, no Kafka), answers its probe and scrape paths, and stops on
SIGTERM within the pod's terminationGracePeriodSeconds."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import aiohttp

from tests.deploy.rendered import Doc, env_from_config_maps, of_kind, render
from tests.support.processes import free_port, wait_until

BIN = Path(sys.executable).parent
START_TIMEOUT_SECONDS = 40.0
# Settings that point at the cluster's services; the test runs without them.
CLUSTER_ONLY = {"KAFKA_BOOTSTRAP_SERVERS", "AUTH_JWKS_URL", "AUTH_ISSUER"}


def _argv(container: Doc, port: int) -> list[str]:
    args = list(container["args"])
    args[args.index("--host") + 1] = "127.0.0.1"
    args[args.index("--port") + 1] = str(port)
    return [str(BIN / container["command"][0]), *args, "--dev"]


async def _status(session: aiohttp.ClientSession, url: str) -> tuple[int, str] | None:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=3)) as r:
            return r.status, await r.text()
    except (aiohttp.ClientError, TimeoutError):
        return None


async def _run_pod(docs: tuple[Doc, ...], deployment: Doc, workdir: Path) -> None:
    name = deployment["metadata"]["name"]
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SCHEDULER_", "NOTIFICATION_", "AUTH_", "KAFKA_", "WEBHOOK_"))
    }
    env.update(
        {k: v for k, v in env_from_config_maps(docs, container).items() if k not in CLUSTER_ONLY}
    )
    workdir.mkdir()
    log = workdir / "pod.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *_argv(container, port), cwd=workdir, env=env, stdout=out, stderr=out
        )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                assert proc.returncode is None, f"{name} exited: {log.read_text()[-2000:]}"
                answer = await _status(
                    session, base + container["readinessProbe"]["httpGet"]["path"]
                )
                return answer is not None and answer[0] == 200

            await wait_until(ready, START_TIMEOUT_SECONDS, f"{name} ready")
            for probe in ("livenessProbe", "startupProbe"):
                answer = await _status(session, base + container[probe]["httpGet"]["path"])
                assert answer is not None, (name, probe)
                assert answer[0] == 200, (name, probe, answer)
            annotations = template["metadata"]["annotations"]
            metrics = await _status(session, base + annotations["prometheus.io/path"])
            assert metrics is not None
            assert metrics[0] == 200
            assert "# HELP" in metrics[1], f"{name}: /metrics is not Prometheus text"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        grace = template["spec"]["terminationGracePeriodSeconds"]
        code = await asyncio.wait_for(proc.wait(), grace)
        assert code == 0, f"{name} exited {code}: {log.read_text()[-2000:]}"
        assert time.monotonic() - started < grace
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_every_deployment_serves_its_probes_and_stops_within_its_grace(
    tmp_path: Path,
) -> None:
    docs = render("overlays/production")
    deployments = of_kind(docs, "Deployment")
    assert len(deployments) == 3
    await asyncio.gather(
        *(_run_pod(docs, d, tmp_path / d["metadata"]["name"]) for d in deployments)
    )
