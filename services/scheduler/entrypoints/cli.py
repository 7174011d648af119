"""The `scheduler` console script. Each subcommand lives in its own module, imported lazily so
that `scheduler preview` never pays for the web stack."""

from __future__ import annotations

from collections.abc import Sequence

from servicekit.cli import run_subcommands

# name -> (module under scheduler.entrypoints, help); the module has add_arguments() and run()
SUBCOMMANDS = {
    "serve": ("cli_serve", "HTTP API and/or workers"),
    "migrate": ("cli_migrate", "apply database migrations to SCHEDULER_DATABASE_URL"),
    "preview": ("cli_preview", "print the next occurrences of a cron expression in a zone"),
    "token": ("cli_token", "mint a dev bearer token signed with AUTH_HS256_KEY"),
    "schedules": ("cli_schedules", "list, show and change schedules through the API"),
    "apply": ("cli_apply", "create, update (and prune) schedules from YAML or JSON files"),
    "diff": ("cli_diff", "what `apply` would change (exit 0: nothing, 1: changes, 2: error)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    return run_subcommands("scheduler", "scheduler.entrypoints", SUBCOMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
