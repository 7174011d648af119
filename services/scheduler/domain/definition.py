"""What a tenant declares a schedule to be (DESIGN.md §5, §7a): one immutable value object,
`ScheduleDefinition`, made of its name, its `Timing` (when), its action (what: webhook to a
`Target` or event, with a payload) and its `RunPolicies` (how runs are retried, missed, overlapped
and broken off). The `Schedule` aggregate holds one; the API and the database each map it once.

No field has a default: building a definition names every field, so a field added here fails at
every construction that forgets it instead of silently taking a default.

`FIELD_NAMES` are the flat names the API and the table use (a part's fields are named as the
API names them, so the flat names are unique); `with_changes` applies a PATCH spelled in them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from scheduler.domain.policies import (
    Action,
    BreakerPolicy,
    CompletionPolicy,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
)
from scheduler.domain.timing import Timing

MAX_DESCRIPTION_CHARS = 1000
# Labels (DESIGN.md §7b): at most 32 pairs, so a schedule's labels stay one small index entry
# set and one console row of chips; keys and values are the Kubernetes label alphabet, which
# needs no quoting in a `?label=k=v` query or a JSON path.
MAX_LABELS = 32
LABEL_KEY_PATTERN = r"^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9._-]{0,63}$"
# A schedule's key (DESIGN.md §7b): the tenant's own id for it, at most 128 characters.
SCHEDULE_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"


@dataclass(frozen=True)
class Target:
    """Where a webhook schedule delivers. Headers never contain reserved names (checked at the
    API edge with webhookdeliver.is_reserved_header)."""

    url: str
    headers: Mapping[str, str]
    timeout_seconds: int


@dataclass(frozen=True)
class RunPolicies:
    retry_policy: RetryPolicy
    misfire_policy: MisfirePolicy
    overlap_policy: OverlapPolicy
    breaker: BreakerPolicy
    completion: CompletionPolicy
    """What ends a webhook run: its 2xx, or a completion call (callback mode)."""


@dataclass(frozen=True)
class ScheduleDefinition:
    name: str
    description: str | None
    timing: Timing
    action: Action
    target: Target | None
    """Set for a webhook, None for an event (`problems()`)."""
    payload: Any
    policies: RunPolicies
    labels: Mapping[str, str]
    """Tenant-chosen key/value pairs to filter by (MAX_LABELS, the patterns above)."""

    def with_changes(self, changes: Mapping[str, Any]) -> ScheduleDefinition:
        """This definition with some fields replaced, named by their flat names; raises
        ValueError naming the unknown ones."""
        unknown = set(changes).difference(FIELD_NAMES)
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        parts: dict[str, Any] = {}
        for part, names in _PART_FIELDS.items():
            mine = {k: v for k, v in changes.items() if k in names}
            if mine:
                parts[part] = replace(getattr(self, part), **mine)
        top = {k: v for k, v in changes.items() if k in _TOP_FIELDS}
        return replace(self, **top, **parts)

    def changes_to(self, other: ScheduleDefinition) -> dict[str, Any]:
        """The fields, by their flat names, whose value in `other` differs from this one's, with
        `other`'s values: `self.with_changes(self.changes_to(other)) == other`."""
        mine, theirs = _flat(self), _flat(other)
        return {name: theirs[name] for name in FIELD_NAMES if mine[name] != theirs[name]}

    def problems(self) -> list[tuple[str, str]]:
        """(field, reason) for every cross-field rule this definition breaks (the timing's own
        rules are `check_timing`'s)."""
        out: list[tuple[str, str]] = []
        if self.action is Action.WEBHOOK and self.target is None:
            out.append(("target", "is required when action is 'webhook'"))
        if self.action is Action.EVENT and self.target is not None:
            out.append(("target", "must be absent when action is 'event'"))
        policies = self.policies
        out += [(f"retry_policy.{n}", r) for n, r in policies.retry_policy.problems()]
        out += [(f"breaker.{n}", r) for n, r in policies.breaker.problems()]
        out += [(f"completion.{n}", r) for n, r in policies.completion.problems()]
        if policies.completion.is_callback and self.action is not Action.WEBHOOK:
            out.append(("completion.mode", "'callback' needs action 'webhook'"))
        return out


# Which flat names belong to which part: derived from the dataclasses, never written out.
_PART_FIELDS = {
    "timing": frozenset(f.name for f in fields(Timing)),
    "policies": frozenset(f.name for f in fields(RunPolicies)),
}
_TOP_FIELDS = frozenset(f.name for f in fields(ScheduleDefinition)) - set(_PART_FIELDS)
FIELD_NAMES: tuple[str, ...] = tuple(sorted(_TOP_FIELDS.union(*_PART_FIELDS.values())))
"""Every field of a definition by its flat name (the API's and the table's)."""


def _flat(d: ScheduleDefinition) -> dict[str, Any]:
    out = {name: getattr(d, name) for name in _TOP_FIELDS}
    for part, names in _PART_FIELDS.items():
        value = getattr(d, part)
        out.update({name: getattr(value, name) for name in names})
    return out


__all__ = [
    "FIELD_NAMES",
    "LABEL_KEY_PATTERN",
    "LABEL_VALUE_PATTERN",
    "MAX_DESCRIPTION_CHARS",
    "MAX_LABELS",
    "SCHEDULE_KEY_PATTERN",
    "RunPolicies",
    "ScheduleDefinition",
    "Target",
]
