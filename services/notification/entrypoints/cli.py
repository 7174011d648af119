"""The `notification` console script. Each subcommand lives in its own module, imported lazily so
that each subcommand imports only what it needs."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# name -> (module under notification.entrypoints, help); the module has add_arguments() and run()
SUBCOMMANDS = {
    "serve": ("cli_serve", "HTTP API and/or workers"),
    "migrate": ("cli_migrate", "apply database migrations to NOTIFICATION_DATABASE_URL"),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="notification")
    sub = parser.add_subparsers(dest="command", required=True)
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        # Only the chosen subcommand's module is imported (and only it defines its arguments).
        if name == chosen:
            module = importlib.import_module(f"notification.entrypoints.{module_name}")
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    args = parser.parse_args(argv)
    result: int = args._run(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
