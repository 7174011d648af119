"""The SQL runs repository (service_layer/run_ports.RunRepository) on the unit of work's
connection: Core statements, set-based on the hot path (a whole claim batch or group of
completions per statement or executemany), portable across PostgreSQL and SQLite.

PostgreSQL: claims are `UPDATE runs ... WHERE id IN (SELECT id ... FOR UPDATE SKIP LOCKED LIMIT n)
RETURNING ...`, so replicas never claim the same run; planners lock due schedules the same way.
A settle (`settle_leased`) is one statement: a data-modifying CTE that checks the leases, writes
the runs, inserts attempts and outbox rows for the written runs and resets the breaker count.
SQLite: `FOR UPDATE` is not emitted; the engine's single pooled connection makes every
transaction the only writer; a settle is four multi-row statements (UPDATE ... FROM VALUES
... RETURNING for the lease check and the write, then attempts, outbox, breaker reset).

One file per role: planning.py (the planner), claims.py (the dispatcher), settle.py (the settle
write), completion.py (completion callbacks), reads.py (the runs API), replanning.py (a retime's
runs planned ahead), rows.py (row mapping); hand-written SQL in sql_postgres.py and sql_sqlite.py.
"""

from __future__ import annotations

from scheduler.adapters.db.runs.claims import Claims
from scheduler.adapters.db.runs.completion import CompletionQueries
from scheduler.adapters.db.runs.planning import PlannerQueries
from scheduler.adapters.db.runs.reads import RunReads
from scheduler.adapters.db.runs.replanning import Replanning
from scheduler.adapters.db.runs.settle import Settle
from scheduler.service_layer.run_ports import RunRepository


class SqlRunRepository(
    PlannerQueries, Claims, Settle, RunReads, Replanning, CompletionQueries, RunRepository
):
    pass
