"""A per-key fixed-window rate limit held in the API process's memory (the completion route's:
calls per run id per minute). Each API process counts alone, so N processes let through up to N
times the limit: enough to stop a loop or a guesser hammering one run, which is its purpose.
Bounded: at most `max_keys` windows are remembered, the oldest forgotten first."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

DEFAULT_MAX_KEYS = 10_000


class KeyedRateLimit:
    def __init__(
        self,
        limit: int,
        window_seconds: float = 60.0,
        *,
        max_keys: int = DEFAULT_MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1 or window_seconds <= 0 or max_keys < 1:
            raise ValueError("limit, window_seconds and max_keys must be positive")
        self.limit = limit
        self.window_seconds = window_seconds
        self.max_keys = max_keys
        self.clock = clock
        self._windows: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def check(self, key: str) -> int | None:
        """Count one call for `key`: None when it is allowed, else the whole seconds until its
        window ends (the Retry-After)."""
        now = self.clock()
        start, count = self._windows.pop(key, (now, 0))
        if now - start >= self.window_seconds:
            start, count = now, 0
        if count >= self.limit:
            self._windows[key] = (start, count)
            return max(1, math.ceil(start + self.window_seconds - now))
        self._windows[key] = (start, count + 1)
        while len(self._windows) > self.max_keys:
            self._windows.popitem(last=False)
        return None
