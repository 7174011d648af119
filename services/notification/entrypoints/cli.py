"""The `notification` console script. Each subcommand lives in its own module, imported lazily so
that each subcommand imports only what it needs."""

from __future__ import annotations

from collections.abc import Sequence

from servicekit.cli import run_subcommands

# name -> (module under notification.entrypoints, help); the module has add_arguments() and run()
SUBCOMMANDS = {
    "serve": ("cli_serve", "HTTP API and/or workers"),
    "migrate": ("cli_migrate", "apply database migrations to NOTIFICATION_DATABASE_URL"),
}


def main(argv: Sequence[str] | None = None) -> int:
    return run_subcommands("notification", "notification.entrypoints", SUBCOMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
