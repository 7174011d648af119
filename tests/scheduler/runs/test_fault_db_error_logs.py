"""No bound SQL parameter in the logs of a database error, through the real API and worker.

PostgreSQL: a trigger makes every insert into `schedules` and `runs` fail with a message that
quotes the whole row (`row_to_json(NEW)`: the target's `X-Api-Key` header value, the payload,
the secret ciphertext), as a server message quoting a bad value would. The API
(`scheduler serve --role api`) answers a create and a manual trigger with 500, the worker's
planner fails its insert; both logs must name the error and hold none of the planted values.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from scheduler.adapters.db.tables import schedules
from scheduler.bootstrap import utc_now
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import make_container
from tests.scheduler.runs.processes import WorkerProcess, wait_until, worker_env
from tests.scheduler.runs.receiver import Receiver
from tests.support.processes import ServiceProcess

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

EXPLODE = [
    """CREATE FUNCTION test_explode() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN RAISE EXCEPTION 'forced failure of %', row_to_json(NEW)::text; END $$""",
    *(
        f"CREATE TRIGGER explode BEFORE INSERT ON {table} FOR EACH ROW"
        " EXECUTE FUNCTION test_explode()"
        for table in ("schedules", "runs")
    ),
]


def body(url: str, api_key: str, marker: str, name: str) -> dict[str, object]:
    return {
        "name": name,
        "cron": "* * * * *",
        "timezone": "UTC",
        "action": "webhook",
        "target": {"url": url, "headers": {"X-Api-Key": api_key}},
        "payload": {"marker": marker},
    }


async def test_database_errors_log_no_bound_parameters(
    pg_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    api_key = f"planted-key-{uuid.uuid4().hex}"
    marker = f"planted-payload-{uuid.uuid4().hex}"
    env = worker_env(pg_url, LOG_FORMAT="json")
    api = ServiceProcess(
        "scheduler.entrypoints.cli",
        tmp_path,
        env=env,
        args=("serve", "--role", "api", "--port", "{port}"),
        name="api",
    )
    worker = WorkerProcess(pg_url, tmp_path, env=env)
    direct = make_container(pg_url, utc_now)
    try:
        await api.start()
        # A new connection per request: uvicorn closes one whose request ended in a 500.
        fresh = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(
            base_url=api.base_url, headers=auth(), timeout=30, limits=fresh
        ) as http:
            created = await http.post(
                "/v1/schedules/", json=body(receiver.url("/ok"), api_key, marker, "ok")
            )
            assert created.status_code == 201, created.text
            schedule_id = created.json()["id"]
            async with direct.engine.begin() as conn:
                ciphertext = (
                    await conn.execute(
                        sa.select(schedules.c.secret_ciphertext).where(
                            schedules.c.id == schedule_id
                        )
                    )
                ).scalar_one()
                for statement in EXPLODE:
                    await conn.execute(sa.text(statement))
                # Due now: the worker's planner inserts its run, which the trigger refuses.
                await conn.execute(
                    sa.update(schedules).values(next_run_at=utc_now() - timedelta(seconds=1))
                )
            refused = await http.post(
                "/v1/schedules/", json=body(receiver.url("/ok"), api_key, marker, "refused")
            )
            assert refused.status_code == 500  # not an outage: the database refused the row
            assert api_key not in refused.text
            triggered = await http.post(f"/v1/schedules/{schedule_id}/trigger")
            assert triggered.status_code == 500
        await worker.start()

        async def planner_failed() -> bool:
            return "planner: step failed" in worker.log.read_text(errors="replace")

        await wait_until(planner_failed, 45, "the planner's failed insert logged")
    finally:
        await worker.aclose()
        await api.aclose()
        await direct.aclose()
    for proc in (api, worker):
        out = proc.log.read_text(errors="replace")
        assert "RaiseError" in out, proc.log.name  # the error itself is logged ...
        assert "sqlstate=P0001" in out
        assert "[SQL: INSERT INTO" in out  # ... with its statement (placeholders only)
        for planted in (api_key, marker, ciphertext):  # ... and none of the values
            assert planted not in out, (proc.log.name, planted[:20])
