"""`scheduler migrate`: apply the packaged Alembic migrations to SCHEDULER_DATABASE_URL."""

from __future__ import annotations

import argparse
import asyncio
import sys

from scheduler.adapters.db.migrate import current_revision, upgrade
from scheduler.config import SchedulerSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--revision", default="head", help="target revision (default: head)")


def run(args: argparse.Namespace) -> int:
    url = SchedulerSettings().database_url

    async def go() -> str | None:
        await upgrade(url, args.revision)
        return await current_revision(url)

    try:
        revision = asyncio.run(go())
    except Exception as exc:  # one line for the operator; no traceback with a DSN in it
        print(f"scheduler migrate: failed: {type(exc).__name__}: {exc}"[:500], file=sys.stderr)
        return 1
    print(f"scheduler database at revision {revision}")
    return 0
