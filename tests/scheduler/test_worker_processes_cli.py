"""`scheduler serve --processes`: what is refused with one line and exit code 2 (another role, a
count out of bounds, SQLite), and the parent's merge of its children's metrics. The process tree
itself is tested in tests/scheduler/runs/test_worker_processes.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.entrypoints.workers.supervisor_http import merged_exposition
from tests.scheduler.conftest import HS256_KEY, SECRET_KEY
from tests.support.processes import free_port


def _serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "SCHEDULER_"))}
    base.update(SCHEDULER_SECRET_KEY=SECRET_KEY, AUTH_HS256_KEY=HS256_KEY, **env)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler.entrypoints.cli",
            "serve",
            "--port",
            str(free_port()),
            *args,
        ],
        cwd=tmp_path,
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--role", "api", "--processes", "2"], {}, "--processes needs --role worker"),
        (["--processes", "2"], {}, "--processes needs --role worker"),  # role defaults to all
        (["--role", "worker", "--processes", "0"], {}, "--processes must be 1-64, got 0"),
        (["--role", "worker", "--processes", "65"], {}, "--processes must be 1-64, got 65"),
        (["--role", "worker"], {"SCHEDULER_WORKER_PROCESSES": "65"}, "worker_processes"),
        (["--role", "worker", "--processes", "2"], {}, "needs PostgreSQL"),  # SQLite default
    ],
)
def test_refused_with_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    out = _serve(tmp_path, *args, **env)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert says in lines[0]


def _child(ready: float, attempts: float) -> str:
    registry = CollectorRegistry()
    Gauge("scheduler_ready", "ready", registry=registry).set(ready)
    c = Counter("scheduler_attempts", "attempts", ["outcome"], registry=registry)
    c.labels("ok").inc(attempts)
    return generate_latest(registry).decode()


def test_metrics_merge_labels_each_child_and_keeps_one_family() -> None:
    own = CollectorRegistry()
    Counter("scheduler_worker_process_restarts", "restarts", registry=own).inc(2)
    text = merged_exposition(
        generate_latest(own).decode(), [("0", _child(1, 3)), ("1", _child(0, 5))]
    ).decode()
    assert text.count("# TYPE scheduler_ready gauge") == 1
    assert text.count("# TYPE scheduler_attempts_total counter") == 1
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if not s.name.endswith("_created")
    }
    assert samples == {
        ("scheduler_worker_process_restarts_total", ()): 2.0,
        ("scheduler_ready", (("process", "0"),)): 1.0,
        ("scheduler_ready", (("process", "1"),)): 0.0,
        ("scheduler_attempts_total", (("outcome", "ok"), ("process", "0"))): 3.0,
        ("scheduler_attempts_total", (("outcome", "ok"), ("process", "1"))): 5.0,
    }


def test_metrics_merge_skips_a_truncated_child() -> None:
    text = merged_exposition("", [("0", _child(1, 1)), ("1", "scheduler_ready{process=")])
    assert b'scheduler_ready{process="0"} 1.0' in text
    assert b'process="1"' not in text
