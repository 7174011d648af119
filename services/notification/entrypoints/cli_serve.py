"""`notification serve [--host 127.0.0.1] [--port 8088] [--dev]`: API, consumers, dispatcher.
SIGTERM/SIGINT: the HTTP server stops (servicekit's one server helper), then the workers."""

from __future__ import annotations

import argparse
import asyncio
import sys

from notification.config import NotificationSettings
from servicekit.http.server import http_server, serve
from servicekit.logging import configure_logging
from servicekit.runtime.gc_tuning import freeze_startup_heap
from servicekit.settings import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8088)
    parser.add_argument(
        "--dev",
        action="store_true",
        help="generate missing keys under ./var (0600) and migrate on start",
    )


async def _serve(settings: NotificationSettings, host: str, port: int) -> None:
    from notification.entrypoints.runtime import build_notification

    app = build_notification(settings)
    freeze_startup_heap()  # the process is built: what stays alive from here is frozen
    await app.start()
    try:
        server = http_server(
            app.asgi_app, host=host, port=port, limits=settings.http_limits(), log_level="info"
        )
        await serve([server])
    finally:
        await app.stop()


def run(args: argparse.Namespace) -> int:
    configure_logging(service="notification")
    try:
        settings = NotificationSettings(dev=bool(args.dev))
        asyncio.run(_serve(settings, args.host, args.port))
    except ConfigError as exc:
        print(f"notification: {exc}", file=sys.stderr)
        return 2
    return 0
