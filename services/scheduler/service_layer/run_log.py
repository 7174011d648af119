"""One log line per settled run outcome and per breaker pause, on logger `scheduler.runs`.

Written after the settle commits (a result whose lease was lost is not logged: the new holder's
is). Fields, never a payload, header, secret or response text: schedule (name), schedule_id,
run_id, tenant, outcome (succeeded, failed, skipped, or retrying: the attempt failed and another
is due), attempt (its number), status_code, error_kind, skip_reason, retry_in_s.

The per-run line is at debug level unless `verbose` (`SCHEDULER_LOG_RUNS=true`, which
`make run` sets): a busy production worker settles thousands of runs a minute, the local demo a
few, and there it is the point. The breaker's pause is at warning level either way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from scheduler.domain.run import RunStatus
from scheduler.service_layer.run_ports import Completion

log = logging.getLogger("scheduler.runs")


class RunLog:
    def __init__(self, *, verbose: bool = False) -> None:
        self.level = logging.INFO if verbose else logging.DEBUG

    def settled(
        self, completions: Sequence[Completion], lost: Iterable[str], now: datetime
    ) -> None:
        """The written completions that ended an attempt or the run (not releases or parks)."""
        if not log.isEnabledFor(self.level):  # the common production case: one check a batch
            return
        dropped = set(lost)
        for c in completions:
            if c.run.id in dropped:
                continue
            fields = _run_fields(c, now)
            if fields is not None:
                log.log(self.level, "run %s", fields["outcome"], extra=fields)

    def paused(self, completions: Sequence[Completion], schedule_ids: Sequence[str]) -> None:
        """The breaker paused these schedules in the write of `completions`."""
        for schedule_id in schedule_ids:
            last = [c for c in completions if c.run.schedule_id == schedule_id][-1]
            log.warning(
                "schedule paused by the breaker",
                extra={
                    "schedule": last.schedule_name,
                    "schedule_id": schedule_id,
                    "tenant": last.run.tenant_id,
                    "run_id": last.run.id,
                },
            )


def _run_fields(c: Completion, now: datetime) -> dict[str, Any] | None:
    run = c.run
    status = run.status
    if status is RunStatus.RETRYING:
        outcome = "retrying"
    elif status.is_terminal:
        outcome = str(status)
    else:  # released at stop or parked to wait: nothing finished
        return None
    fields: dict[str, Any] = {
        "schedule": c.schedule_name,
        "schedule_id": run.schedule_id,
        "run_id": run.id,
        "tenant": run.tenant_id,
        "outcome": outcome,
        "attempt": run.attempt_count,
    }
    if c.attempts:
        last = c.attempts[-1]
        fields["attempt"] = last.number
        if last.status_code is not None:
            fields["status_code"] = last.status_code
        if last.error_kind is not None:
            fields["error_kind"] = last.error_kind
    if run.skip_reason is not None:
        fields["skip_reason"] = str(run.skip_reason)
    if outcome == "retrying" and run.next_attempt_at is not None:
        fields["retry_in_s"] = round(max((run.next_attempt_at - now).total_seconds(), 0.0), 1)
    return fields
