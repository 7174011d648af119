"""Flow control's ports (service_layer/flow_control.py): what the delivery gate reads and
writes, inside the claim's transaction and after the completions."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from servicekit.flow import DestinationPolicy, FlowState

if TYPE_CHECKING:
    from notification.domain.destinations import DestinationEvent
    from notification.service_layer.ports import ClaimedDelivery

Key = tuple[str, str]
"""(tenant id, destination host:port)."""


@dataclass(frozen=True)
class DestinationRecord:
    policy: DestinationPolicy | None
    """The tenant's (copied from the scheduler's events), None: the defaults apply."""
    state: FlowState


@dataclass(frozen=True)
class Deferral:
    """A claimed delivery handed back unattempted: due again at `due_at`, no attempt counted."""

    delivery_id: str
    owner: str
    due_at: datetime


class ClaimFlow(Protocol):
    """The gate's reads and writes in the claim's transaction (adapters/destinations.py)."""

    async def with_rows(self, keys: Sequence[Key]) -> set[Key]:
        """Those of `keys` with a record (a policy or a state), read without a lock."""
        ...

    async def lock_for_claim(
        self, keys: Sequence[Key], owner: str, now: datetime
    ) -> tuple[dict[Key, DestinationRecord], dict[Key, int]]:
        """Serialise with the other claims of these destinations (every replica's), then their
        records (locked) and the attempts in flight there: deliveries leased to other claims."""
        ...

    async def save_states(self, states: Mapping[Key, FlowState], now: datetime) -> None: ...
    async def defer(self, deferrals: Sequence[Deferral]) -> None: ...


class ClaimGate(Protocol):
    async def admit_claimed(
        self, claimed: Sequence[ClaimedDelivery], tx: ClaimFlow, owner: str, now: datetime
    ) -> list[ClaimedDelivery]:
        """The claimed deliveries that may be attempted now; the others are deferred in `tx`."""
        ...


StateChange = Callable[[Mapping[Key, DestinationRecord]], Mapping[Key, FlowState]]


class DestinationStore(Protocol):
    """`destinations` outside a claim (adapters/destinations.py), one transaction a method."""

    async def update_states(self, keys: Sequence[Key], change: StateChange, now: datetime) -> None:
        """Lock the keys' records, write the states `change` computes from them."""
        ...

    async def wake(self, delivery_ids: Sequence[str], now: datetime) -> int:
        """Make these deferred deliveries due now (those still unleased, due later)."""
        ...

    async def apply_events(self, events: Sequence[DestinationEvent], now: datetime) -> int:
        """Apply the scheduler's flow-control events to the copy; returns how many changed it."""
        ...


class HoldAnnouncer(Protocol):
    """Tells the scheduler that a destination held notification's deliveries (a 429/503 with
    Retry-After), so its runs to the same tenant and destination wait too
    (adapters/hold_events.py: a `destination.held` event on `destination-events`)."""

    async def held(self, key: Key, until: datetime, now: datetime) -> None: ...
