"""`notification migrate`: apply the packaged Alembic migrations to NOTIFICATION_DATABASE_URL."""

from __future__ import annotations

import argparse
import asyncio

from notification.adapters.db import create_engine
from notification.adapters.migrate import upgrade
from notification.config import NotificationSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--revision", default="head", help="target revision (default: head)")


async def _migrate(settings: NotificationSettings, revision: str) -> None:
    # Migrations keep the connect, lock and checkout bounds but may run long statements.
    engine = create_engine(settings.database_url, settings.database_bounds().for_migrations())
    try:
        await upgrade(engine, revision)
    finally:
        await engine.dispose()


def run(args: argparse.Namespace) -> int:
    settings = NotificationSettings()
    asyncio.run(_migrate(settings, args.revision))
    print(f"notification: migrated to {args.revision}")
    return 0
