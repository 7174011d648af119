"""The one backoff formula of both services: capped exponential, with full jitter.

    ceiling(n) = min(cap, initial * multiplier ** (n - 1))      never decreases with n
    delay(n)   = uniform(floor * ceiling(n), ceiling(n))        floor 0: full jitter

Full jitter spreads the retries of many callers that failed together over the whole window,
instead of letting them come back in waves. Webhook delivery retries (`webhookdeliver.
BackoffPolicy`) use exactly this; worker loops (`worker.Backoff`) keep half the ceiling as a
floor (`floor=0.5`) so a loop that keeps failing against a down database or bus never comes back
at once. Pure: the caller passes the random generator.
"""

from __future__ import annotations

import math
import random


def backoff_ceiling(
    attempt: int, *, initial_seconds: float, max_seconds: float, multiplier: float = 2.0
) -> float:
    """The largest delay after failure number `attempt` (1-based), before jitter."""
    exponent = max(attempt - 1, 0)
    if multiplier == 1.0 or exponent == 0:
        return min(initial_seconds, max_seconds)
    # Compare in log space: multiplier ** exponent overflows a float for large attempts.
    if exponent * math.log(multiplier) >= math.log(max_seconds / initial_seconds):
        return max_seconds
    return min(max_seconds, initial_seconds * multiplier**exponent)


def jittered(ceiling: float, rng: random.Random | None = None, *, floor: float = 0.0) -> float:
    """A delay drawn uniformly from [floor * ceiling, ceiling] (the module's `random` without
    `rng`)."""
    low = floor * ceiling
    return rng.uniform(low, ceiling) if rng is not None else random.uniform(low, ceiling)
