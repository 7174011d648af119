"""What flow control needs of the store (DESIGN.md §7b "Flow control"): the tenants'
destination policies and each destination's state (`servicekit.flow`), the in-flight count of
a destination (its leased runs, every worker's), the runs a claim defers and the pending runs a
hold moves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from servicekit.flow import DestinationPolicy, FlowState

Key = tuple[str, str]
"""(tenant_id, destination)."""


@dataclass(frozen=True)
class DestinationRecord:
    tenant_id: str
    destination: str
    policy: DestinationPolicy | None
    """The tenant's policy; None when it set none (the defaults apply)."""
    state: FlowState
    updated_at: datetime


@dataclass(frozen=True)
class Deferral:
    run_id: str
    owner: str
    due_at: datetime
    held_seconds: float = 0.0
    """How long it is kept back (from the claim to `due_at`): added to an attempted run's
    `held_seconds`, which max_retry_duration_seconds does not count."""


class DestinationRepository(Protocol):
    async def get(self, tenant_id: str, destination: str) -> DestinationRecord | None: ...

    async def list(
        self, tenant_id: str, *, after: str | None, limit: int
    ) -> list[DestinationRecord]: ...

    async def count_configured(self, tenant_id: str) -> int: ...

    async def put_policy(
        self, tenant_id: str, destination: str, policy: DestinationPolicy, now: datetime
    ) -> bool:
        """Set the policy; True when it created the row."""
        ...

    async def delete_policy(self, tenant_id: str, destination: str, now: datetime) -> bool:
        """Drop the policy (the state stays until it expires); False when there was none."""
        ...

    async def in_flight(self, keys: Sequence[Key], *, excluding_owner: str = "") -> dict[Key, int]:
        """Leased runs per destination (every worker's), those of `excluding_owner` aside."""
        ...

    async def with_rows(self, keys: Sequence[Key]) -> set[Key]:
        """Those of `keys` with a row (a policy or a state), read without a lock."""
        ...

    async def lock_for_claim(
        self, keys: Sequence[Key], owner: str
    ) -> tuple[dict[Key, DestinationRecord], dict[Key, int]]:
        """Serialise the claims of these destinations until commit (PostgreSQL: advisory
        locks, in key order), then read their rows (locked) and their leased runs, every
        worker's but `owner`'s (the claim's own), as of after the locks."""
        ...

    async def lock_for_update(self, keys: Sequence[Key]) -> dict[Key, DestinationRecord]:
        """Read these rows locked for an update of their state."""
        ...

    async def save_states(self, states: Mapping[Key, FlowState], now: datetime) -> None:
        """Write each destination's state (a row without a policy is created when needed)."""
        ...

    async def defer_runs(self, deferrals: Sequence[Deferral]) -> int:
        """Hand claimed runs back pending, due at `due_at`, with no attempt counted."""
        ...

    async def wake_runs(self, due: Sequence[tuple[str, datetime]]) -> int:
        """Make these deferred runs (id, when) due sooner (those still waiting: pending or
        retrying, leased to nobody, due later than `when`)."""
        ...

    async def hold_pending(self, key: Key, until: datetime, now: datetime) -> int:
        """Make the destination's due runs due at `until` at the earliest (SKIP LOCKED: a run a
        claim holds meets the hold in that claim)."""
        ...
