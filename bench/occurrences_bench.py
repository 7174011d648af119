"""Occurrence throughput: our engine vs croniter vs cronsim, same expressions, same start, same N,
in the same process. `python -m bench occurrences [--quick]`.

For each expression: occurrences/s for ours (iter_after under each DST policy, and repeated
next_after as a planner would call it), cronsim (iteration) and croniter (get_next), single
thread; the ratio of ours to the faster baseline and of `skip` / `literal` to `shift`; and
whether the three sequences agree (as instants, `shift` being the rule the baselines share).
Each figure is the best of REPEATS runs (the machine is shared and noisy). Also: the cost of
one next_after on sparse schedules, which must not scan minute by minute.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "services")]

from croniter import croniter  # noqa: E402
from cronsim import CronSim  # noqa: E402

from scheduler.domain.occurrences import Recurrence  # noqa: E402
from scheduler.domain.policies import DstPolicy  # noqa: E402

CASES = [
    ("*/5 * * * *", "UTC"),
    ("0 3 * * 1-5", "Africa/Addis_Ababa"),
    ("30 2 * * *", "America/New_York"),
]
SPARSE = [("0 0 29 2 1", "UTC"), ("0 0 29 2 *", "UTC"), ("0 0 29 2 */7", "America/New_York")]
START = datetime(2026, 1, 1, tzinfo=UTC)
REPEATS = 3


def _best_rate(
    produce: Callable[[str, str, int], list[float]], expression: str, zone: str, count: int
) -> tuple[float, list[float]]:
    best = float("inf")
    result: list[float] = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        result = produce(expression, zone, count)
        best = min(best, time.perf_counter() - began)
    return count / best, result


def _ours_iter(expression: str, zone: str, count: int) -> list[float]:
    recurrence = Recurrence.parse(expression, zone)
    return [dt.timestamp() for dt in islice(recurrence.iter_after(START), count)]


def _ours_iter_policy(policy: DstPolicy) -> Callable[[str, str, int], list[float]]:
    def produce(expression: str, zone: str, count: int) -> list[float]:
        recurrence = Recurrence.parse(expression, zone, policy)
        return [dt.timestamp() for dt in islice(recurrence.iter_after(START), count)]

    return produce


def _ours_next(expression: str, zone: str, count: int) -> list[float]:
    recurrence = Recurrence.parse(expression, zone)
    stamps, cursor = [], START
    for _ in range(count):
        nxt = recurrence.next_after(cursor)
        assert nxt is not None
        stamps.append(nxt.timestamp())
        cursor = nxt
    return stamps


def _cronsim(expression: str, zone: str, count: int) -> list[float]:
    iterator: Iterator[datetime] = CronSim(expression, START.astimezone(ZoneInfo(zone)))
    return [dt.timestamp() for dt in islice(iterator, count)]


def _croniter(expression: str, zone: str, count: int) -> list[float]:
    it = croniter(expression, START.astimezone(ZoneInfo(zone)))
    return [it.get_next(datetime).timestamp() for _ in range(count)]


def _disagreements(ours: list[float], other: list[float]) -> dict[str, object]:
    mismatches = [i for i, (a, b) in enumerate(zip(ours, other, strict=True)) if a != b]
    first = None
    if mismatches:
        i = mismatches[0]
        first = {
            "index": i,
            "ours": datetime.fromtimestamp(ours[i], UTC).isoformat(),
            "theirs": datetime.fromtimestamp(other[i], UTC).isoformat(),
        }
    return {"agree": not mismatches, "mismatches": len(mismatches), "first_mismatch": first}


def run(quick: bool) -> dict[str, object]:
    count = 2_000 if quick else 20_000
    report: dict[str, object] = {"n": count, "start": START.isoformat(), "repeats": REPEATS}
    for expression, zone in CASES:
        ours_rate, ours = _best_rate(_ours_iter, expression, zone, count)
        next_rate, chained = _best_rate(_ours_next, expression, zone, count)
        sim_rate, sim = _best_rate(_cronsim, expression, zone, count)
        iter_rate, itr = _best_rate(_croniter, expression, zone, count)
        skip_rate, _ = _best_rate(_ours_iter_policy(DstPolicy.SKIP), expression, zone, count)
        literal_rate, _ = _best_rate(_ours_iter_policy(DstPolicy.LITERAL), expression, zone, count)
        faster = max(sim_rate, iter_rate)
        report[f"{expression} {zone}"] = {
            "ours_iter_per_s": round(ours_rate),
            "ours_skip_iter_per_s": round(skip_rate),
            "ours_literal_iter_per_s": round(literal_rate),
            "ratio_skip_vs_shift": round(skip_rate / ours_rate, 2),
            "ratio_literal_vs_shift": round(literal_rate / ours_rate, 2),
            "ours_next_after_per_s": round(next_rate),
            "cronsim_per_s": round(sim_rate),
            "croniter_per_s": round(iter_rate),
            "ratio_iter_vs_faster_baseline": round(ours_rate / faster, 1),
            "ratio_next_after_vs_faster_baseline": round(next_rate / faster, 1),
            "next_after_chain_equals_iter": chained == ours,
            "vs_cronsim": _disagreements(ours, sim),
            "vs_croniter": _disagreements(ours, itr),
        }
        print(f"occurrences: {expression} {zone} done", file=sys.stderr)
    for expression, zone in SPARSE:
        recurrence = Recurrence.parse(expression, zone)
        calls = 50 if quick else 500
        began = time.perf_counter()
        for _ in range(calls):
            found = recurrence.next_after(START)
        ours_us = (time.perf_counter() - began) / calls * 1e6
        began = time.perf_counter()
        for _ in range(calls):
            theirs = next(CronSim(expression, START.astimezone(ZoneInfo(zone))))
        sim_us = (time.perf_counter() - began) / calls * 1e6
        assert found is not None
        report[f"sparse {expression} {zone}"] = {
            "ours_next_after_us": round(ours_us, 1),
            "cronsim_parse_and_next_us": round(sim_us, 1),
            "next": found.isoformat(),
            "agrees_with_cronsim": found.timestamp() == theirs.timestamp(),
        }
    return report
