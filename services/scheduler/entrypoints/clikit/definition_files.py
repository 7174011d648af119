"""Schedule definitions read from YAML and JSON files for `scheduler apply` and `diff`.

A path is a file or a directory (its `*.yaml`, `*.yml`, `*.json` files, sorted by name; with
`recursive`, its subdirectories' too). YAML: one definition per document (`---` separates them),
or a list under `schedules:`. JSON: one definition, a list, or `{"schedules": [...]}`. Every
definition is a mapping with a string `key`; keys are unique across everything read.

Anything wrong is a `DefinitionFileError` whose message is one line naming the file and where in
it (`a.yaml: document 3: schedules[1]: 'key' is required`): documents count from 1, list items
from 0 as the API's `schedules[3].cron` does. Bounded: bytes read, definitions, files, nesting and
values (YAML aliases cannot expand into a bomb). Only YAML's safe loader is used.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import yaml

MAX_TOTAL_BYTES = 16 * 1024 * 1024
MAX_DEFINITIONS = 10_000  # the apply endpoint's limit (DESIGN.md §7b)
MAX_FILES = 10_000
MAX_DEPTH = 64
# Values (scalars, lists, mappings) in all definitions together: 10,000 ordinary definitions hold
# well under a million; an alias bomb would hold billions.
MAX_VALUES = 5_000_000
SUFFIXES = (".yaml", ".yml", ".json")
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present


class DefinitionFileError(Exception):
    """A file that cannot be read as definitions; str() is one line naming the file."""


@dataclass(frozen=True)
class Origin:
    """Where a definition came from, for messages: `a.yaml: document 2: schedules[4]`."""

    file: str
    document: int | None = None  # YAML documents, from 1; None for JSON (one document)
    item: int | None = None  # index in a list, from 0

    def __str__(self) -> str:
        parts = [self.file]
        if self.document is not None:
            parts.append(f"document {self.document}")
        if self.item is not None:
            parts.append(f"schedules[{self.item}]")
        return ": ".join(parts)


@dataclass(frozen=True)
class Definitions:
    """The definitions read, in order, each with its origin (same index)."""

    items: list[dict[str, Any]]
    origins: list[Origin]


def load_definitions(
    paths: Sequence[str | Path], *, recursive: bool = False, require_key: bool = True
) -> Definitions:
    """Every definition in `paths` (files or directories), in order; DefinitionFileError.
    Without `require_key` (a create or an update from a file) a definition may lack a key."""
    reader = _Reader(require_key)
    files = [f for p in paths for f in _files(Path(p), recursive)]
    if len(files) > MAX_FILES:
        raise DefinitionFileError(f"more than {MAX_FILES} files to read")
    for file in files:
        reader.read_file(file)
    if not reader.items:
        raise DefinitionFileError(f"{', '.join(map(str, paths))}: no schedule definitions found")
    return Definitions(reader.items, reader.origins)


def load_one(path: str | Path) -> dict[str, Any]:
    """The one definition (or set of fields) a file holds; a key is optional."""
    found = load_definitions([path], require_key=False)
    if len(found.items) != 1:
        raise DefinitionFileError(f"{path}: expected one definition, found {len(found.items)}")
    return found.items[0]


def _files(path: Path, recursive: bool) -> Iterator[Path]:
    if path.is_dir():
        entries = sorted(path.iterdir())
        yield from (e for e in entries if e.is_file() and e.suffix.lower() in SUFFIXES)
        if recursive:
            for sub in entries:
                if sub.is_dir() and not sub.is_symlink():
                    yield from _files(sub, recursive)
    elif path.is_file():
        yield path
    else:
        raise DefinitionFileError(f"{path}: no such file or directory")


class _Reader:
    def __init__(self, require_key: bool) -> None:
        self.require_key = require_key
        self.items: list[dict[str, Any]] = []
        self.origins: list[Origin] = []
        self.bytes_left = MAX_TOTAL_BYTES
        self.values_left = MAX_VALUES
        self.seen_keys: dict[str, Origin] = {}

    def read_file(self, path: Path) -> None:
        text = self._text(path)
        name = str(path)
        if path.suffix.lower() == ".json":
            self._json(name, text)
        else:
            self._yaml(name, text)

    def _text(self, path: Path) -> str:
        try:
            with path.open("rb") as f:
                data = f.read(self.bytes_left + 1)
        except OSError as exc:
            raise DefinitionFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if len(data) > self.bytes_left:
            raise DefinitionFileError(
                f"{path}: the files read exceed {_size(MAX_TOTAL_BYTES)} in total"
            )
        self.bytes_left -= len(data)
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DefinitionFileError(f"{path}: not UTF-8 (byte {exc.start})") from None

    def _json(self, name: str, text: str) -> None:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DefinitionFileError(
                f"{name}: JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
        except RecursionError:
            raise DefinitionFileError(f"{name}: nested too deeply") from None
        self._document(doc, Origin(name))

    def _yaml(self, name: str, text: str) -> None:
        number = 0
        try:
            for number, doc in enumerate(yaml.load_all(text, Loader=_SAFE_LOADER), start=1):
                if doc is not None:  # an empty document (`---` at the end, comments only)
                    self._document(doc, Origin(name, number))
        except yaml.YAMLError as exc:
            raise DefinitionFileError(
                f"{name}: document {number + 1}: YAML error{_yaml_where(exc)}: {_yaml_problem(exc)}"
            ) from None
        except RecursionError:
            raise DefinitionFileError(f"{name}: document {number + 1}: nested too deeply") from None

    def _document(self, doc: Any, origin: Origin) -> None:
        if isinstance(doc, dict) and "schedules" in doc:
            if set(doc) != {"schedules"} or not isinstance(doc["schedules"], list):
                raise DefinitionFileError(
                    f"{origin}: 'schedules' must be a list and the document's only field"
                )
            doc = doc["schedules"]
        if isinstance(doc, list):
            for index, item in enumerate(doc):
                self._definition(item, Origin(origin.file, origin.document, index))
        else:
            self._definition(doc, origin)

    def _definition(self, raw: Any, origin: Origin) -> None:
        if not isinstance(raw, dict):
            raise DefinitionFileError(f"{origin}: a definition must be a mapping, not {_kind(raw)}")
        if len(self.items) >= MAX_DEFINITIONS:
            raise DefinitionFileError(f"{origin}: more than {MAX_DEFINITIONS} definitions")
        definition = self._plain(raw, origin, "", 0)
        key = definition.get("key")
        if key is None and self.require_key:
            raise DefinitionFileError(f"{origin}: 'key' is required")
        if key is not None:
            self._check_key(key, origin)
        self.items.append(definition)
        self.origins.append(origin)

    def _check_key(self, key: Any, origin: Origin) -> None:
        if not isinstance(key, str) or not key:
            raise DefinitionFileError(f"{origin}: 'key' must be a non-empty string")
        if key in self.seen_keys:
            raise DefinitionFileError(
                f"{origin}: key {key!r} is also defined at {self.seen_keys[key]}"
            )
        self.seen_keys[key] = origin

    def _plain(self, value: Any, origin: Origin, field: str, depth: int) -> Any:
        """`value` as JSON data: YAML timestamps become RFC 3339 text; anything JSON cannot
        carry (bytes, sets, non-string keys, NaN) is an error naming the field."""
        self.values_left -= 1
        if self.values_left < 0:
            raise DefinitionFileError(f"{origin}: more than {MAX_VALUES} values (YAML aliases?)")
        if depth > MAX_DEPTH:
            raise DefinitionFileError(f"{origin}: '{field}' is nested deeper than {MAX_DEPTH}")
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    where = f"'{field}' has" if field else "has"
                    raise DefinitionFileError(
                        f"{origin}: {where} a field name that is not text: {k!r}"
                    )
                out[k] = self._plain(v, origin, f"{field}.{k}" if field else k, depth + 1)
            return out
        if isinstance(value, list):
            return [self._plain(v, origin, f"{field}[{i}]", depth + 1) for i, v in enumerate(value)]
        if isinstance(value, date):  # a datetime too
            return value.isoformat()
        if isinstance(value, float) and not math.isfinite(value):
            raise DefinitionFileError(f"{origin}: '{field}' is {value}, which JSON cannot carry")
        if value is None or isinstance(value, str | int | float):
            return value
        raise DefinitionFileError(f"{origin}: '{field}' is {_kind(value)}, which JSON cannot carry")


def _size(n: int) -> str:
    mib = 1024 * 1024
    return f"{n // mib} MiB" if n % mib == 0 else f"{n} bytes"


def _kind(value: Any) -> str:
    names = {list: "a list", str: "text", int: "a number", float: "a number", bool: "a boolean"}
    return names.get(type(value), f"a {type(value).__name__}")


def _yaml_where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return ""
    return f" at line {mark.line + 1}, column {mark.column + 1}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    text = str(problem if problem else exc)
    return " ".join(text.split())  # one line
