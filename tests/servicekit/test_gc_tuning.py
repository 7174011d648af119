"""servicekit.runtime.gc_tuning: after start-up the heap is frozen (never traversed again) and the
youngest
generation is collected less often; cycles are still collected. In a child process: the test
process's own collector is left as it is."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import gc, weakref
from servicekit.runtime.gc_tuning import GEN0_THRESHOLD, freeze_startup_heap
freeze_startup_heap()
assert gc.get_freeze_count() > 0, "nothing frozen"
assert gc.get_threshold()[0] == GEN0_THRESHOLD
class Node:
    pass
a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
gc.collect()
assert gone() is None, "a cycle made after start-up was not collected"
print("ok")
"""


def test_the_start_up_heap_is_frozen_and_later_cycles_are_still_collected() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
