"""Consumer-side memory of recently seen event ids.

It only absorbs the duplicates of a redelivered batch cheaply; the durable deduplication lives in
each service's database, so forgetting an id here never causes a double effect.
"""

from __future__ import annotations

from collections import OrderedDict

# 10,000 ids cover several uncommitted batches of the default poll size (500) at ~100 B each.
DEFAULT_CAPACITY = 10_000


class SeenIds:
    """A bounded least-recently-used set of event ids."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, event_id: str) -> bool:
        """Remember `event_id`; True if it was new, False if it was already remembered."""
        if event_id in self._ids:
            self._ids.move_to_end(event_id)
            return False
        self._ids[event_id] = None
        if len(self._ids) > self._capacity:
            self._ids.popitem(last=False)
        return True

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)
