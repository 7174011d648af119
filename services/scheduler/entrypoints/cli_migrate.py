"""`scheduler migrate`: apply the packaged Alembic migrations to SCHEDULER_DATABASE_URL, within
the SCHEDULER_DB_* bounds (statements may run longer: `DatabaseBounds.for_migrations`)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from scheduler.adapters.db.migrate import current_revision, upgrade
from scheduler.config import SchedulerSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--revision", default="head", help="target revision (default: head)")


def run(args: argparse.Namespace) -> int:
    settings = SchedulerSettings()
    url, bounds = settings.database_url, settings.database_bounds()

    async def go() -> str | None:
        await upgrade(url, args.revision, bounds=bounds)
        return await current_revision(url, bounds=bounds)

    try:
        revision = asyncio.run(go())
    except Exception as exc:  # one line for the operator; no traceback with a DSN in it
        # SQLAlchemy appends the statement and a link on further lines: the first one says why.
        why = (str(exc).strip().splitlines() or [""])[0]
        print(f"scheduler migrate: failed: {type(exc).__name__}: {why}"[:500], file=sys.stderr)
        return 1
    print(f"scheduler database at revision {revision}")
    return 0
