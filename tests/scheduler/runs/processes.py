"""Real worker subprocesses (`python -m scheduler.entrypoints.workers`) for the fault proofs."""

from __future__ import annotations

from pathlib import Path

from tests.scheduler.conftest import HS256_KEY, SECRET_KEY
from tests.support.processes import ServiceProcess, wait_until

__all__ = ["WorkerProcess", "wait_until", "worker_env"]


def worker_env(database_url: str, **extra: str) -> dict[str, str]:
    return {
        "SCHEDULER_DATABASE_URL": database_url,
        "SCHEDULER_SECRET_KEY": SECRET_KEY,
        "AUTH_HS256_KEY": HS256_KEY,
        "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
        **extra,
    }


class WorkerProcess(ServiceProcess):
    def __init__(
        self, database_url: str, workdir: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        super().__init__(
            "scheduler.entrypoints.workers",
            workdir,
            env=env or worker_env(database_url),
            args=("--port", "{port}", *args),
            name="worker",
        )
