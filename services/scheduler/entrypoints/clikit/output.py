"""How the CLI prints API objects: `-o json` and `-o yaml` print them as the API sent them,
`-o table` (the default) a compact aligned table. Times are RFC 3339, as the API sends them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import yaml

FORMATS = ("table", "json", "yaml")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\s]+")
MAX_CELL_CHARS = 60

Column = tuple[str, Callable[[Mapping[str, Any]], Any]]


def dump(data: Any, fmt: str, out: TextIO) -> None:
    """`data` (JSON data) as JSON or YAML."""
    if fmt == "yaml":
        out.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))
    else:
        out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], out: TextIO) -> None:
    cells = [[name for name, _ in columns]]
    cells += [[_cell(get(row)) for _, get in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for r in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _cell(value: Any) -> str:
    if value is None or value == "" or value == {} or value == []:
        return "-"
    text = _UNPRINTABLE.sub(" ", str(value)).strip()
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def _labels(s: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((s.get("labels") or {}).items()))


def _timing(s: Mapping[str, Any]) -> str:
    when = s.get("cron") or (f"at {s['run_at']}" if s.get("run_at") else "-")
    return f"{when} {s.get('timezone') or ''}".strip()


SCHEDULE_COLUMNS: list[Column] = [
    ("ID", lambda s: s.get("id")),
    ("KEY", lambda s: s.get("key")),
    ("NAME", lambda s: s.get("name")),
    ("STATE", lambda s: s.get("state")),
    ("SCHEDULE", _timing),
    ("NEXT RUN", lambda s: s.get("next_occurrence_at") or s.get("next_run_at")),
    ("LABELS", _labels),
]

RUN_COLUMNS: list[Column] = [
    ("ID", lambda r: r.get("id")),
    ("TRIGGER", lambda r: r.get("trigger")),
    ("STATUS", lambda r: r.get("status")),
    ("SCHEDULED FOR", lambda r: r.get("scheduled_for")),
    ("ATTEMPTS", lambda r: r.get("attempt_count")),
    ("FINISHED", lambda r: r.get("finished_at")),
]

VERSION_COLUMNS: list[Column] = [
    ("VERSION", lambda v: v.get("version")),
    ("AT", lambda v: v.get("at")),
    ("ACTOR", lambda v: v.get("actor")),
    ("SOURCE", lambda v: v.get("source")),
    ("CHANGED", lambda v: ",".join(str(c.get("field")) for c in v.get("changes") or [])),
]

LEDGER_COLUMNS: list[Column] = [
    ("SCHEDULED FOR", lambda e: e.get("scheduled_for")),
    ("VERSION", lambda e: e.get("version")),
    ("OUTCOME", lambda e: e.get("outcome")),
    ("RUN", lambda e: e.get("run_id")),
    ("REASON", lambda e: e.get("reason")),
]


def show(
    data: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    fmt: str,
    columns: Sequence[Column],
    out: TextIO,
) -> None:
    """One object or a list of them, in `fmt`; a table shows one row per object."""
    if fmt == "table":
        table([data] if isinstance(data, Mapping) else data, columns, out)
    else:
        dump(data, fmt, out)
