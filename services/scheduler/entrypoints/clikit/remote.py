"""The CLI's connection to the API: `--url`/`SCHEDULER_URL`, `--token`/`SCHEDULER_TOKEN`, a
`schedulerclient.Client`, and refusals turned into one line on stderr and exit status 2.

A refused call prints the problem's `detail` first; a 422 with several field errors names the
rest on the following lines (indented). A server that cannot be reached is one line naming the
URL.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from schedulerclient import ApiError, Client, TransportError

DEFAULT_URL = "http://127.0.0.1:8089"
EXIT_ERROR = 2
DEFAULT_TIMEOUT_SECONDS = 30.0
# An apply of 10,000 definitions may take the server's whole apply deadline (120 s by default).
APPLY_TIMEOUT_SECONDS = 180.0
MAX_TIMEOUT_SECONDS = 3600.0
MAX_FIELD_LINES = 20  # the API sends at most 20 field errors; a plan never needs more

FieldNote = Callable[[str], str | None]
"""A field name (`schedules[3].cron`) -> where it came from (`a.yaml: document 4`), or None."""


class CliError(Exception):
    """A refusal already worded for the user: one line, exit status 2."""


def add_connection_arguments(
    parser: argparse.ArgumentParser, *, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> None:
    parser.add_argument(
        "--url",
        default=None,
        help=f"the scheduler API (default: $SCHEDULER_URL, else {DEFAULT_URL})",
    )
    parser.add_argument("--token", default=None, help="bearer token (default: $SCHEDULER_TOKEN)")
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=timeout,
        metavar="SECONDS",
        help=f"how long to wait for each answer (1..{MAX_TIMEOUT_SECONDS:g}, default {timeout:g})",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 1 <= value <= MAX_TIMEOUT_SECONDS:  # NaN fails too
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds from 1 to {MAX_TIMEOUT_SECONDS:g}"
        )
    return value


def base_url(args: argparse.Namespace) -> str:
    url: str = args.url or os.environ.get("SCHEDULER_URL") or DEFAULT_URL
    return url.rstrip("/")


def client_of(args: argparse.Namespace) -> Client:
    token = args.token or os.environ.get("SCHEDULER_TOKEN") or None
    return Client(base_url(args), token=token, timeout=args.timeout)


def data_of(result: Any) -> Any:
    """A client result (a pydantic model, a list of them, or plain data) as JSON data, the
    shape the API sent."""
    if hasattr(result, "model_dump"):
        return result.model_dump(mode="json", by_alias=True)
    if isinstance(result, list | tuple):
        return [data_of(r) for r in result]
    return result


def report(
    prog: str,
    args: argparse.Namespace,
    call: Callable[[Client], int],
    note: FieldNote | None = None,
) -> int:
    """Run `call` with a client for `args`; an API refusal or a transport failure becomes lines
    on stderr and exit 2."""
    try:
        with client_of(args) as client:
            return call(client)
    except ApiError as exc:
        first, *rest = refusal_lines(exc, note)
        print(f"{prog}: {first}", *rest, sep="\n", file=sys.stderr)
        return EXIT_ERROR
    except CliError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (TransportError, httpx.TransportError) as exc:
        print(f"{prog}: {transport_line(base_url(args), exc)}", file=sys.stderr)
        return EXIT_ERROR


def problem_of(exc: ApiError) -> dict[str, Any]:
    problem = getattr(exc, "problem", None)
    data = data_of(problem)
    return data if isinstance(data, dict) else {}


def refusal_lines(exc: ApiError, note: FieldNote | None = None) -> list[str]:
    """The detail (first line), then `  field: detail (origin)` for each field error."""
    problem = problem_of(exc)
    status = getattr(exc, "status", None) or problem.get("status")
    detail = problem.get("detail") or getattr(exc, "detail", None) or problem.get("title")
    first = _one_line(str(detail) if detail else f"the API answered {status}")
    raw = problem.get("errors")
    errors = [e for e in raw if isinstance(e, Mapping)] if isinstance(raw, list) else []
    listed = []
    for error in errors[:MAX_FIELD_LINES]:
        field, text = str(error.get("field", "")), _one_line(str(error.get("detail", "")))
        where = note(field) if note else None
        listed.append((f"  {field}: {text}" + (f" ({where})" if where else ""), where))
    if len(listed) == 1 and listed[0][1] is None:
        return [first]  # the detail already names the one field
    return [first, *(line for line, _ in listed)]


def transport_line(url: str, exc: Exception) -> str:
    """One line for a call that got no answer, naming the URL and httpx's reason."""
    cause = exc.__cause__ if isinstance(exc, TransportError) and exc.__cause__ else exc
    if isinstance(cause, httpx.ConnectError):
        return f"cannot connect to {url}: {_reason(cause)}"
    if isinstance(cause, httpx.TimeoutException):
        return f"{url} did not answer in time"
    return f"no answer from {url}: {_reason(cause)}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _reason(exc: BaseException) -> str:
    text = _one_line(str(exc))
    return text or type(exc).__name__
