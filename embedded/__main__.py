"""`python -m embedded` (`make run`): the embedded default on this machine (DESIGN §2).

One process, one shared `eventbus.InProcessBus`:
- the scheduler: API on 127.0.0.1:8089 and its workers (planner, dispatcher, outbox relay,
  tenant-state consumer), SQLite at var/scheduler.db;
- notification: API on 127.0.0.1:8088, its consumers, dispatcher and email sender, SQLite at
  var/notification.db, alert emails written as .eml files under var/mail/ (no SMTP configured).

Dev keys are generated under ./var (0600); both services verify tokens with var/auth_hs256_key.
Databases are migrated on start. `WEBHOOK_ALLOW_PRIVATE_NETWORKS` defaults to true here so the
demo can target receivers on this machine; set it to false in the environment to refuse them.
Ports: `--scheduler-port` / `--notification-port` / `--console-port` (or EMBEDDED_SCHEDULER_PORT /
EMBEDDED_NOTIFICATION_PORT / EMBEDDED_CONSOLE_PORT; the console port serves the console and both
APIs on one origin, `console/gateway.py`, and the banner links it signed in); a busy one stops
start-up with one line naming it and the flag (`ports.py`), and the ready banner (a dev token of
DEV_TENANT, the README's tenant too, the console link and the /docs links) is printed only once
every port accepts connections. Ctrl-C (SIGINT) or SIGTERM stops both cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Sequence

import uvicorn
from starlette.types import ASGIApp

from authclient import mint_token
from authclient.settings import DEFAULT_AUDIENCE, DEFAULT_ISSUER
from console.app import create_console_app
from console.gateway import Gateway
from embedded.ports import Port, busy_port, wait_listening
from eventbus import InProcessBus
from notification.config import NotificationSettings
from notification.entrypoints.runtime import NotificationApp, build_notification
from scheduler.bootstrap import Container
from scheduler.entrypoints.cli_serve import build, serve
from servicekit.http.server import http_server
from servicekit.logging import configure_logging
from servicekit.runtime.gc_tuning import freeze_startup_heap
from servicekit.settings import ConfigError

HOST = "127.0.0.1"
DEFAULT_SCHEDULER_PORT, DEFAULT_NOTIFICATION_PORT = 8089, 8088
DEFAULT_CONSOLE_PORT = 8080
# The notification API's prefixes on the one-origin gateway; everything else under /v1/schedules
# is the scheduler's, the rest the console's.
SCHEDULER_PREFIXES = ("/v1/schedules", "/v1/runs", "/v1/destinations")
NOTIFICATION_PREFIXES = ("/v1/subscriptions", "/v1/alert-contacts", "/v1/notifications")
DEV_TENANT = "dev-tenant"
DEV_SCOPES = ["schedules:read", "schedules:write", "notifications:read", "notifications:write"]
TOKEN_TTL_SECONDS = 12 * 3600
TTL_HOURS = TOKEN_TTL_SECONDS // 3600


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
    p.add_argument(
        "--console-port",
        type=int,
        default=int(os.environ.get("EMBEDDED_CONSOLE_PORT", DEFAULT_CONSOLE_PORT)),
        help="the console and both APIs on one origin, as the platform's gateway serves them",
    )
    return p.parse_args(argv)


def ports(args: argparse.Namespace) -> list[Port]:
    return [
        Port("scheduler", args.scheduler_port, "--scheduler-port", "EMBEDDED_SCHEDULER_PORT"),
        Port(
            "notification",
            args.notification_port,
            "--notification-port",
            "EMBEDDED_NOTIFICATION_PORT",
        ),
        Port("console", args.console_port, "--console-port", "EMBEDDED_CONSOLE_PORT"),
    ]


def banner(
    token: str | None, scheduler_port: int, notification_port: int, console_port: int
) -> str:
    """Printed once every port listens: every URL in it answers when it appears."""
    sched = f"http://{HOST}:{scheduler_port}"
    notif = f"http://{HOST}:{notification_port}"
    console = f"http://{HOST}:{console_port}/"
    text = f"""
ready: scheduler API on {sched}, notification API on {notif}
console and both APIs on one origin: {console}
interactive API docs: {sched}/docs and {notif}/docs
(SQLite and dev keys under ./var, alert emails as .eml under ./var/mail; Ctrl-C to stop)
"""
    if token is None:  # tokens come from a JWKS issuer: nothing to paste
        return text
    return f"""{text}
# open the console signed in as {DEV_TENANT!r} (the token stays in the URL fragment and the tab):
{console}#token={token}

# a dev token of tenant {DEV_TENANT!r} (the README's examples use it too), valid {TTL_HOURS} h
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
    console_port: int,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Notification first (its consumers join the bus before anything is published), then the
    scheduler until SIGTERM/SIGINT; the scheduler's workers stop first, then notification.
    The gateway on `console_port` serves the console and the same two app objects on one
    origin. `on_ready` runs once every port accepts connections."""
    await notification.start()
    announce = asyncio.create_task(
        _announce(on_ready, [scheduler_port, notification_port, console_port]),
        name="ready-banner",
    )
    limits = notification.container.settings.http_limits()
    server = http_server(notification.asgi_app, host=HOST, port=notification_port, limits=limits)

    def gateway(scheduler_app: ASGIApp) -> list[uvicorn.Server]:
        routes = [(prefix, scheduler_app) for prefix in SCHEDULER_PREFIXES]
        routes += [(prefix, notification.asgi_app) for prefix in NOTIFICATION_PREFIXES]
        app = Gateway(routes, fallback=create_console_app())
        return [http_server(app, host=HOST, port=console_port, limits=limits)]

    try:
        await serve(
            container,
            host=HOST,
            port=scheduler_port,
            role="all",
            dev=True,
            also=[server],
            around_app=gateway,
        )
    finally:
        announce.cancel()
        await notification.stop()


async def _announce(on_ready: Callable[[], None] | None, ports: list[int]) -> None:
    if await wait_listening(HOST, ports):
        if on_ready is not None:
            on_ready()
    else:
        print(f"embedded: ports {ports} still not listening; see the log above", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    busy = busy_port(HOST, ports(args))
    if busy is not None:
        print(f"embedded: {busy}", file=sys.stderr)
        return 2
    configure_logging(service="embedded")
    # The local demo may target webhooks on this machine (DESIGN §3); production never does.
    os.environ.setdefault("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true")
    # Alerts link the console this process serves (the gateway's origin).
    os.environ.setdefault("CONSOLE_PUBLIC_URL", f"http://{HOST}:{args.console_port}")
    # Callback-mode deliveries name the completion URL of the scheduler port this process serves.
    os.environ.setdefault("SCHEDULER_PUBLIC_URL", f"http://{HOST}:{args.scheduler_port}")
    # Here the terminal's news is each run's outcome; `serve` logs it at debug level.
    os.environ.setdefault("SCHEDULER_LOG_RUNS", "true")
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
    text = banner(dev_token(built), args.scheduler_port, args.notification_port, args.console_port)
    freeze_startup_heap()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve_all(
                built,
                notification,
                scheduler_port=args.scheduler_port,
                notification_port=args.notification_port,
                console_port=args.console_port,
                on_ready=lambda: print(text, flush=True),
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
