"""The shipped ClickHouse SQL (deploy/clickhouse) on chDB, in-process ClickHouse.

chDB has no Kafka, so the Kafka-engine table is only parsed (EXPLAIN AST) and a Null-engine
stand-in with the same columns, plus the Kafka engine's `_error` virtual column, takes its name.
The materialised view is then created from its file unchanged: inserting envelopes into the
stand-in runs exactly the transform ClickHouse runs on every block read from Kafka.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chdb import session

from tests.observability.references import ROOT

SQL_DIR = ROOT / "deploy" / "clickhouse"
QUEUE_DDL = SQL_DIR / "02_schedule_events_queue.sql"


def sql_of(path: Path) -> str:
    """The statement of a file, without comments and the final semicolon."""
    text = re.sub(r"--[^\n]*", "", path.read_text())
    return text.strip().rstrip(";").strip()


def stand_in_for_kafka(kafka_ddl: str) -> str:
    head, engine = kafka_ddl.split("ENGINE = Kafka", 1)
    assert "kafka_topic_list = 'schedule-events'" in engine
    columns_end = head.rindex(")")
    return head[:columns_end].rstrip() + ",\n    _error String\n)\nENGINE = Null"


class Analytics:
    """A chDB session holding the run_analytics database as the deploy files define it."""

    def __init__(self, workdir: Path) -> None:
        self.session = session.Session(str(workdir / "chdb"))
        self.run(sql_of(SQL_DIR / "01_database.sql"))
        self.run(stand_in_for_kafka(sql_of(QUEUE_DDL)))
        self.run(sql_of(SQL_DIR / "03_runs.sql"))
        self.run(sql_of(SQL_DIR / "04_runs_mv.sql"))

    def run(self, sql: str, fmt: str = "CSV", **params: Any) -> str:
        result = (
            self.session.query(sql, fmt, params=params) if params else self.session.query(sql, fmt)
        )
        return str(result)

    def publish(self, values: Iterable[bytes]) -> None:
        """Each value as the Kafka engine hands it to the view: the message, whole, in `raw`."""
        rows = "\n".join(json.dumps({"raw": v.decode(), "_error": ""}) for v in values)
        self.run(f"INSERT INTO run_analytics.schedule_events_queue FORMAT JSONEachRow\n{rows}")

    def query(self, name: str, **params: Any) -> list[dict[str, Any]]:
        out = self.run(sql_of(SQL_DIR / "queries" / f"{name}.sql"), "JSONEachRow", **params)
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def close(self) -> None:
        self.session.close()
