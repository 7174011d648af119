"""`python -m tests.scheduler.runs.shifted_worker <worker args>`: the real worker process
(`scheduler.entrypoints.workers`) on the wall clock shifted by `TEST_CLOCK_OFFSET_SECONDS`, so a
fault test can put a worker minutes after another without waiting for them (nothing is patched:
the offset reaches every worker through the container's clock)."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta

from scheduler.bootstrap import utc_now
from scheduler.entrypoints.workers.__main__ import main

OFFSET = timedelta(seconds=float(os.environ.get("TEST_CLOCK_OFFSET_SECONDS", "0")))


def shifted() -> datetime:
    return utc_now() + OFFSET


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], clock=shifted))
