"""`python -m embedded` (`make run`): the embedded default on this machine (DESIGN §2).

One process, one shared `eventbus.InProcessBus`:
- the scheduler: API on 127.0.0.1:8089 and its workers (planner, dispatcher, outbox relay,
  tenant-state consumer), SQLite at var/scheduler.db;
- notification: API on 127.0.0.1:8088, its consumers, dispatcher and email sender, SQLite at
  var/notification.db, alert emails written as .eml files under var/mail/ (no SMTP configured).

Dev keys are generated under ./var (0600); both services verify tokens with var/auth_hs256_key.
Databases are migrated on start. `WEBHOOK_ALLOW_PRIVATE_NETWORKS` defaults to true here so the
demo can target receivers on this machine; set it to false in the environment to refuse them.
Ports: `--scheduler-port` / `--notification-port` (or EMBEDDED_SCHEDULER_PORT /
EMBEDDED_NOTIFICATION_PORT). Ctrl-C (SIGINT) or SIGTERM stops both cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

import uvicorn

from authclient import mint_token
from authclient.settings import DEFAULT_AUDIENCE, DEFAULT_ISSUER
from eventbus import InProcessBus
from notification.bootstrap import ConfigError
from notification.config import NotificationSettings
from notification.entrypoints.runtime import NotificationApp, build_notification
from scheduler.bootstrap import Container
from scheduler.entrypoints.cli_serve import build, serve
from servicekit.logging import configure_logging

HOST = "127.0.0.1"
DEFAULT_SCHEDULER_PORT, DEFAULT_NOTIFICATION_PORT = 8089, 8088
DEV_TENANT = "dev-tenant"
DEV_SCOPES = ["schedules:read", "schedules:write", "notifications:read", "notifications:write"]
TOKEN_TTL_SECONDS = 12 * 3600


class _QuietServer(uvicorn.Server):
    """Notification's server: signals belong to the scheduler's serve(), which stops first."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m embedded", description=__doc__.split("\n")[0])
    p.add_argument(
        "--scheduler-port",
        type=int,
        default=int(os.environ.get("EMBEDDED_SCHEDULER_PORT", DEFAULT_SCHEDULER_PORT)),
    )
    p.add_argument(
        "--notification-port",
        type=int,
        default=int(os.environ.get("EMBEDDED_NOTIFICATION_PORT", DEFAULT_NOTIFICATION_PORT)),
    )
    return p.parse_args(argv)


def banner(token: str, scheduler_port: int, notification_port: int) -> str:
    sched = f"http://{HOST}:{scheduler_port}"
    notif = f"http://{HOST}:{notification_port}"
    return f"""
scheduler API on {sched}, notification API on {notif}
(SQLite and dev keys under ./var, alert emails as .eml under ./var/mail; Ctrl-C to stop)

export TOKEN={token}
curl -s -X POST {sched}/v1/schedules/ -H "Authorization: Bearer $TOKEN" \\
  -H 'Content-Type: application/json' \\
  -d '{{"name": "hello", "cron": "*/5 * * * *", "timezone": "UTC", "action": "event"}}'
curl -s {sched}/v1/schedules/ -H "Authorization: Bearer $TOKEN"
curl -s {notif}/v1/notifications/ -H "Authorization: Bearer $TOKEN"
"""


def dev_token(container: Container) -> str | None:
    key = container.settings.auth_hs256_key
    if key is None:  # tokens come from a JWKS issuer: nothing to mint
        return None
    return mint_token(
        key.get_secret_value(),
        tenant_id=DEV_TENANT,
        scopes=DEV_SCOPES,
        ttl_seconds=TOKEN_TTL_SECONDS,
        audience=container.auth_settings.AUTH_AUDIENCE or DEFAULT_AUDIENCE,
        issuer=container.auth_settings.AUTH_ISSUER or DEFAULT_ISSUER,
    )


async def serve_all(
    container: Container,
    notification: NotificationApp,
    *,
    scheduler_port: int,
    notification_port: int,
) -> None:
    """Notification first (its consumers join the bus before anything is published), then the
    scheduler until SIGTERM/SIGINT; the scheduler's workers stop first, then notification."""
    await notification.start()
    server = _QuietServer(
        uvicorn.Config(
            notification.asgi_app,
            host=HOST,
            port=notification_port,
            log_level="warning",
            lifespan="off",
            log_config=None,
        )
    )
    notification_task = asyncio.create_task(server.serve(), name="notification-http")
    try:
        await serve(container, host=HOST, port=scheduler_port, role="all", dev=True)
    finally:
        server.should_exit = True
        await asyncio.gather(notification_task, return_exceptions=True)
        await notification.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(service="embedded")
    # The local demo may target webhooks on this machine (DESIGN §3); production never does.
    os.environ.setdefault("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true")
    bus = InProcessBus()
    built = build(dev=True, bus=bus)
    if isinstance(built, str):
        print(f"embedded: {built}", file=sys.stderr)
        return 2
    try:
        notification = build_notification(NotificationSettings(dev=True), bus=bus)
    except ConfigError as exc:
        print(f"embedded: {exc}", file=sys.stderr)
        return 2
    token = dev_token(built)
    if token is not None:
        print(banner(token, args.scheduler_port, args.notification_port), flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve_all(
                built,
                notification,
                scheduler_port=args.scheduler_port,
                notification_port=args.notification_port,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
