"""The cyclic garbage collector's settings of both services' processes (one owner).

A service allocates most of what it keeps at start-up (imports, settings, the engine, the app):
each full collection traversed all of it again while a dispatcher's young objects (a run, its
attempt, its event, per delivery) triggered collections every 700 allocations. After start-up,
`freeze_startup_heap()` moves what exists into the permanent generation (gc.freeze: never
traversed again, never freed) and collects the youngest generation less often. Reference
counting still frees everything that is not in a cycle at once; cycles are still collected.
"""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "freeze_startup_heap"]

GEN0_THRESHOLD = 10_000
"""Allocations (net of frees) between youngest-generation collections (CPython's default: 700)."""


def freeze_startup_heap() -> None:
    """Call once the process is built, before it starts serving."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)
