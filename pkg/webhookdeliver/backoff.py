"""Retry timing: capped exponential backoff with full jitter, bounded by attempts and by time.

The formula is servicekit's (`servicekit.runtime.backoff`), the one both services' worker loops
use too; this policy adds the bounds and `Retry-After`. Pure: the caller passes the attempt
number, the elapsed time and the random generator, so the policy is deterministic under test
and needs no clock.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from servicekit.runtime.backoff import backoff_ceiling, jittered


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """`next_delay(n, ...)` is the wait after attempt `n` (1-based) failed, or None to give up.

    * ceiling(n) = min(max_seconds, initial_seconds * multiplier ** (n - 1)) — never decreases;
    * the delay is uniform in [0, ceiling(n)] ("full jitter", so retries from many runs that
      failed together spread out instead of arriving in waves);
    * a server's `Retry-After` raises the delay to at least that value, still capped at
      `max_seconds` so one endpoint cannot park a run for days;
    * exhausted (None) once `max_attempts` attempts were made, or when waiting would carry the
      total past `max_elapsed_seconds` since the first attempt.
    """

    initial_seconds: float = 1.0
    max_seconds: float = 600.0
    multiplier: float = 2.0
    max_attempts: int = 10
    max_elapsed_seconds: float = 86_400.0

    def __post_init__(self) -> None:
        if not (0 < self.initial_seconds <= self.max_seconds) or not math.isfinite(
            self.max_seconds
        ):
            raise ValueError("need 0 < initial_seconds <= max_seconds < inf")
        if not (1.0 <= self.multiplier < math.inf):
            raise ValueError("multiplier must be >= 1")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if not (0 <= self.max_elapsed_seconds < math.inf):
            raise ValueError("max_elapsed_seconds must be finite and >= 0")

    def ceiling(self, attempt: int) -> float:
        """The largest delay after attempt `attempt` (1-based), before jitter."""
        return backoff_ceiling(
            attempt,
            initial_seconds=self.initial_seconds,
            max_seconds=self.max_seconds,
            multiplier=self.multiplier,
        )

    def next_delay(
        self,
        attempt: int,
        elapsed_seconds: float,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> float | None:
        """Seconds to wait before attempt `attempt + 1`, or None when retries are exhausted."""
        if attempt >= self.max_attempts:
            return None
        ceiling = self.ceiling(attempt)
        delay = jittered(ceiling, rng)
        if retry_after is not None and math.isfinite(retry_after) and retry_after > delay:
            delay = min(retry_after, self.max_seconds)
        if elapsed_seconds + delay > self.max_elapsed_seconds:
            return None
        return delay
