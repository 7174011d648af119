"""What each `scheduler schedules …` command does, given its parsed arguments: one or a few
client calls and the printing. Each returns the exit status; refusals propagate to
`remote.report`, which turns them into one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any

from scheduler.entrypoints.clikit import output, remote
from scheduler.entrypoints.clikit.definition_files import DefinitionFileError, load_one
from schedulerclient import ApiError, Client

PAGE = 100  # the API's largest page
KEY_PREFIX = "key:"
SECRET_NOTE = (
    "the signing secret the API returned is not printed (shown once: use --show-secrets, or "
    "rotate it later with POST /v1/schedules/{id}/secret/rotate)"
)


def resolve(client: Client, ref: str) -> str:
    """A schedule id, or `key:KEY` looked up by the list's `?key=` filter."""
    if not ref.startswith(KEY_PREFIX):
        return ref
    key = ref.removeprefix(KEY_PREFIX)
    page = remote.data_of(client.list_schedules(key=key, limit=1))
    if not page["items"]:
        raise remote.CliError(f"no schedule has the key {key!r}")
    return str(page["items"][0]["id"])


def _pages(fetch: Callable[[str | None, int], Any], limit: int) -> Iterator[dict[str, Any]]:
    """Items of successive pages, at most `limit`; a note on stderr when more exist."""
    cursor: str | None = None
    given = 0
    while True:
        page = remote.data_of(fetch(cursor, min(PAGE, limit - given)))
        for item in page["items"]:
            yield item
            given += 1
        cursor = page.get("next_cursor")
        if not cursor:
            return
        if given >= limit:
            print(f"(more than {limit} items: raise --limit to see more)", file=sys.stderr)
            return


def _show(args: argparse.Namespace, data: Any, columns: list[output.Column]) -> int:
    output.show(data, args.output, columns, sys.stdout)
    return 0


def _show_schedule(args: argparse.Namespace, data: dict[str, Any]) -> int:
    """A schedule an answer carried, its secret printed only with --show-secrets."""
    secret = data.pop("secret", None)
    show_secrets = getattr(args, "show_secrets", False)
    if secret and show_secrets and args.output != "table":
        data["secret"] = secret
    _show(args, data, output.SCHEDULE_COLUMNS)
    if secret and show_secrets and args.output == "table":
        print(f"secret: {secret}")
    elif secret:
        print(f"{SECRET_NOTE}", file=sys.stderr)
    return 0


def _fields(path: str) -> dict[str, Any]:
    try:
        return load_one(path)
    except DefinitionFileError as exc:
        raise remote.CliError(str(exc)) from None


def list_(args: argparse.Namespace, client: Client) -> int:

    def fetch(cursor: str | None, limit: int) -> Any:
        filters = {"state": args.state, "action": args.kind, "key": args.key}
        given = {k: v for k, v in filters.items() if v is not None}
        return client.list_schedules(label=args.label or None, cursor=cursor, limit=limit, **given)

    return _show(args, list(_pages(fetch, args.limit)), output.SCHEDULE_COLUMNS)


def get(args: argparse.Namespace, client: Client) -> int:
    data = remote.data_of(client.get_schedule(resolve(client, args.schedule)))
    return _show(args, data, output.SCHEDULE_COLUMNS)


def create(args: argparse.Namespace, client: Client) -> int:
    definition = _fields(args.filename)
    return _show_schedule(args, remote.data_of(client.create_schedule(definition)))


def update(args: argparse.Namespace, client: Client) -> int:
    changes = _fields(args.filename)
    answer = client.update_schedule(resolve(client, args.schedule), changes)
    return _show_schedule(args, remote.data_of(answer))


def delete(args: argparse.Namespace, client: Client) -> int:
    for ref in args.schedules:
        schedule_id = resolve(client, ref)
        client.delete_schedule(schedule_id)
        print(f"deleted {schedule_id}")
    return 0


def pause(args: argparse.Namespace, client: Client) -> int:
    given = {"reason": args.reason} if args.reason is not None else {}
    data = remote.data_of(client.pause_schedule(resolve(client, args.schedule), **given))
    return _show(args, data, output.SCHEDULE_COLUMNS)


def resume(args: argparse.Namespace, client: Client) -> int:
    data = remote.data_of(client.resume_schedule(resolve(client, args.schedule)))
    return _show(args, data, output.SCHEDULE_COLUMNS)


def trigger(args: argparse.Namespace, client: Client) -> int:
    data = remote.data_of(client.trigger_schedule(resolve(client, args.schedule)))
    return _show(args, data, output.RUN_COLUMNS)


def runs(args: argparse.Namespace, client: Client) -> int:
    schedule_id = resolve(client, args.schedule)
    given = {"status": args.status} if args.status is not None else {}

    def fetch(cursor: str | None, limit: int) -> Any:
        return client.list_runs(schedule_id, cursor=cursor, limit=limit, **given)

    return _show(args, list(_pages(fetch, args.limit)), output.RUN_COLUMNS)


def replay(args: argparse.Namespace, client: Client) -> int:
    data = remote.data_of(client.replay_run(resolve(client, args.schedule), args.run_id))
    return _show(args, data, output.RUN_COLUMNS)


def ledger(args: argparse.Namespace, client: Client) -> int:
    schedule_id = resolve(client, args.schedule)
    window = {k: v for k, v in (("from_", args.from_), ("to", args.to)) if v is not None}
    data = _optional(client, "get_schedule_ledger", schedule_id, **window)
    rows = data if args.output != "table" else data.get("items", [])
    return _show(args, rows, output.LEDGER_COLUMNS)


def versions(args: argparse.Namespace, client: Client) -> int:
    data = _optional(client, "list_schedule_versions", resolve(client, args.schedule))
    rows = data if args.output != "table" else data.get("items", [])
    return _show(args, rows, output.VERSION_COLUMNS)


def _optional(client: Client, name: str, schedule_id: str, **kwargs: Any) -> Any:
    """Call an operation that servers (and clients) from before §7b's ledger and versions lack:
    absent, or a 404/405 for a schedule that exists, is "not supported", one line."""
    unsupported = remote.CliError(f"{name}: not supported by this server")
    method = getattr(client, name, None)
    if method is None:
        raise unsupported
    try:
        return remote.data_of(method(schedule_id, **kwargs))
    except ApiError as exc:
        if exc.status not in (404, 405):
            raise
        client.get_schedule(schedule_id)  # a missing schedule is its own 404
        raise unsupported from None


ACTIONS: dict[str, Callable[[argparse.Namespace, Client], int]] = {
    "list": list_,
    "get": get,
    "create": create,
    "update": update,
    "delete": delete,
    "pause": pause,
    "resume": resume,
    "trigger": trigger,
    "runs": runs,
    "replay": replay,
    "ledger": ledger,
    "versions": versions,
}
