"""Both services' /openapi.json, as served, name every operation for generated clients: one
explicit camelCase verb-first `operationId`, unique across both services (the Python client
covers both and calls their snake_case), and exactly one tag, declared with a description."""

from __future__ import annotations

import re
from typing import Any

from tests.api_contract.conftest import Served

# The verbs an operation id may start with; a new kind of action adds its verb here on purpose.
VERBS = (
    "list",
    "get",
    "put",
    "create",
    "update",
    "delete",
    "apply",
    "pause",
    "resume",
    "trigger",
    "rotate",
    "preview",
    "backfill",
    "replay",
    "restore",
    "complete",
    "mark",
)
OPERATION_ID = re.compile(rf"^(?:{'|'.join(VERBS)})(?:[A-Z][a-z0-9]+)+$")
METHODS = {"get", "put", "post", "patch", "delete", "head", "options"}


def _operations(served: Served) -> list[tuple[str, str, dict[str, Any]]]:
    paths: dict[str, dict[str, Any]] = served.openapi["paths"]  # type: ignore[assignment]
    return [
        (method.upper(), path, op)
        for path, ops in paths.items()
        for method, op in ops.items()
        if method in METHODS
    ]


def test_every_operation_id_is_camel_case_verb_first_and_unique_across_both_services(
    scheduler_server: Served, notification_server: Served
) -> None:
    seen: dict[str, str] = {}
    for served in (scheduler_server, notification_server):
        for method, path, op in _operations(served):
            where = f"{served.base_url} {method} {path}"
            op_id = op.get("operationId")
            assert isinstance(op_id, str), f"{where}: no operationId"
            assert OPERATION_ID.fullmatch(op_id), f"{where}: {op_id!r} is not verb-first camelCase"
            assert op_id not in seen, f"{op_id!r} names both {seen[op_id]} and {where}"
            seen[op_id] = where
    # The names DESIGN.md §7b gives the client, and one per service for the probes.
    assert {"listSchedules", "createSchedule", "getRun"} <= seen.keys()
    assert {"getSchedulerHealth", "getNotificationHealth"} <= seen.keys()


def test_every_operation_has_exactly_one_declared_tag(
    scheduler_server: Served, notification_server: Served
) -> None:
    for served in (scheduler_server, notification_server):
        declared = served.openapi.get("tags")
        assert isinstance(declared, list), f"{served.base_url}: no top-level tags"
        described = {t["name"] for t in declared if t.get("description")}
        used = set()
        for method, path, op in _operations(served):
            tags = op.get("tags")
            assert isinstance(tags, list), f"{method} {path}: no tags"
            assert len(tags) == 1, f"{method} {path}: tags {tags}"
            assert tags[0] in described, f"{method} {path}: tag {tags[0]!r} is not described"
            used.add(tags[0])
        assert used == {t["name"] for t in declared}, f"{served.base_url}: unused tags declared"
