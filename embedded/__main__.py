"""`python -m embedded` (`make run`): the embedded default on this machine.

Generates dev keys under ./var (0600), migrates the SQLite database, starts the scheduler API on
127.0.0.1:8089 and prints a ready-to-paste curl with a dev token. (Notification joins later, in
the same process, on 8088.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

from authclient import mint_token
from authclient.settings import DEFAULT_AUDIENCE, DEFAULT_ISSUER
from scheduler.entrypoints.cli_serve import build, serve

HOST, PORT = "127.0.0.1", 8089
DEV_TENANT = "dev-tenant"


def banner(token: str) -> str:
    base = f"http://{HOST}:{PORT}"
    return f"""
scheduler API on {base}   (SQLite under ./var, dev keys under ./var; Ctrl-C to stop)

export TOKEN={token}
curl -s -X POST {base}/v1/schedules/ -H "Authorization: Bearer $TOKEN" \\
  -H 'Content-Type: application/json' \\
  -d '{{"name": "hello", "cron": "*/5 * * * *", "timezone": "UTC", "action": "event"}}'
curl -s {base}/v1/schedules/ -H "Authorization: Bearer $TOKEN"
"""


def main() -> int:
    # The local demo may target webhooks on this machine (DESIGN §3); production never does.
    os.environ.setdefault("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true")
    built = build(dev=True)
    if isinstance(built, str):
        print(f"embedded: {built}", file=sys.stderr)
        return 2
    key = built.settings.auth_hs256_key
    if key is not None:
        token = mint_token(
            key.get_secret_value(),
            tenant_id=DEV_TENANT,
            scopes=["schedules:read", "schedules:write"],
            ttl_seconds=12 * 3600,
            audience=built.auth_settings.AUTH_AUDIENCE or DEFAULT_AUDIENCE,
            issuer=built.auth_settings.AUTH_ISSUER or DEFAULT_ISSUER,
        )
        print(banner(token), flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(built, host=HOST, port=PORT, role="all", dev=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
