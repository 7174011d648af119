"""`scheduler token --tenant T [--scopes "..."] [--ttl 3600]`: mint a dev HS256 token and print it
alone on stdout. The key is AUTH_HS256_KEY, else the dev key under ./var (written by `serve
--dev` / `make run`); with neither, refuse (exit 2)."""

from __future__ import annotations

import argparse
import os
import sys

from authclient import mint_token
from authclient.settings import DEFAULT_AUDIENCE, DEFAULT_ISSUER
from scheduler.config import DEV_AUTH_KEY_FILE, DEV_VAR_DIR

MAX_TTL_SECONDS = 30 * 86_400


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--scopes", default="schedules:read schedules:write")
    parser.add_argument("--ttl", type=int, default=3600, help="seconds (1..2592000)")
    parser.add_argument("--subject", default="dev")


def signing_key() -> str | None:
    key = os.environ.get("AUTH_HS256_KEY")
    if key:
        return key
    path = DEV_VAR_DIR / DEV_AUTH_KEY_FILE
    return path.read_text().strip() if path.is_file() else None


def run(args: argparse.Namespace) -> int:
    key = signing_key()
    if not key:
        print(
            "scheduler token: no signing key: set AUTH_HS256_KEY or run `make run` once to "
            f"create the dev key ./{DEV_VAR_DIR / DEV_AUTH_KEY_FILE}",
            file=sys.stderr,
        )
        return 2
    if not 1 <= args.ttl <= MAX_TTL_SECONDS:
        print(f"scheduler token: --ttl must be 1..{MAX_TTL_SECONDS}", file=sys.stderr)
        return 2
    try:
        token = mint_token(
            key,
            tenant_id=args.tenant,
            subject=args.subject,
            scopes=args.scopes.split(),
            ttl_seconds=args.ttl,
            audience=os.environ.get("AUTH_AUDIENCE") or DEFAULT_AUDIENCE,
            issuer=os.environ.get("AUTH_ISSUER") or DEFAULT_ISSUER,
        )
    except ValueError as exc:
        print(f"scheduler token: {exc}", file=sys.stderr)
        return 2
    print(token)
    return 0
