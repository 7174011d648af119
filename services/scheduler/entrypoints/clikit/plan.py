"""The plan an apply answer reads as, like `kubectl diff` and `terraform plan`:

    + nightly-report
    ~ hourly-sync: cron, labels
    - old-job
    = 12 unchanged

from `{"dry_run", "created": [key], "updated": [{"key", "fields"}], "unchanged": n,
"deleted": [key], "secrets": {key: secret}}` (DESIGN.md §7b). Secrets never appear in the plan;
`secret_lines` prints the ones a create returned, and only when asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def plan_lines(answer: Mapping[str, Any]) -> list[str]:
    lines = [f"+ {key}" for key in answer.get("created") or []]
    for item in answer.get("updated") or []:
        fields = ", ".join(item.get("fields") or [])
        lines.append(f"~ {item['key']}: {fields}" if fields else f"~ {item['key']}")
    lines += [f"- {key}" for key in answer.get("deleted") or []]
    lines.append(f"= {int(answer.get('unchanged') or 0)} unchanged")
    return lines


def has_changes(answer: Mapping[str, Any]) -> bool:
    return bool(answer.get("created") or answer.get("updated") or answer.get("deleted"))


def summary_line(answer: Mapping[str, Any]) -> str:
    """`3 to create, 1 to update, 0 to delete (dry run)` or `... created, ... updated`."""
    created = len(answer.get("created") or [])
    updated = len(answer.get("updated") or [])
    deleted = len(answer.get("deleted") or [])
    if answer.get("dry_run"):
        return f"{created} to create, {updated} to update, {deleted} to delete (dry run)"
    return f"{created} created, {updated} updated, {deleted} deleted"


def secrets_of(answer: Mapping[str, Any]) -> dict[str, str]:
    secrets = answer.get("secrets") or {}
    return {str(k): str(v) for k, v in secrets.items() if v}


def secret_lines(answer: Mapping[str, Any]) -> list[str]:
    return [f"secret {key}: {secret}" for key, secret in sorted(secrets_of(answer).items())]


def hidden_secrets_note(answer: Mapping[str, Any]) -> str | None:
    """The stderr line saying generated secrets exist but were not printed, or None."""
    count = len(secrets_of(answer))
    if not count:
        return None
    noun = (
        "schedule got a generated signing secret"
        if count == 1
        else ("schedules got a generated signing secret")
    )
    return (
        f"{count} {noun}, not printed (shown once: use --show-secrets, or rotate it later "
        "with POST /v1/schedules/{id}/secret/rotate)"
    )


def without_secrets(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The answer for `-o json|yaml` without --show-secrets: the secrets' keys, no values."""
    out = dict(answer)
    if "secrets" in out:
        out["secrets"] = dict.fromkeys(secrets_of(answer), "<hidden>")
    return out
