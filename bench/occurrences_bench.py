"""Occurrence throughput: our engine vs croniter vs cronsim, same expressions, same start, same N,
in the same process. `python -m bench occurrences [--quick]`.

For each expression: occurrences/s for ours (iter_after under each DST policy, and repeated
next_after as a planner would call it), cronsim (iteration) and croniter (get_next), single
thread; the ratio of ours to the faster baseline and of `skip` / `literal` to `shift`; and
whether the three sequences agree (as instants, `shift` being the rule the baselines share).
Each figure is the best of REPEATS runs (the machine is shared and noisy). Also: the cost of
one next_after on sparse schedules, which must not scan minute by minute.

`worst`: CPU per request of the API's preview path (check_timing, then annotated_occurrences of
count=100, as `POST /v1/schedules/preview` runs it) for the most expensive expressions: a cron
the `skip` policy starves for good (`30 2 8-14 3 */7`, alternating two zones, refused once the
walk passes MAX_GAP_YEARS), February 29 on a Sunday / a Monday, `0 0 31 2 *` (refused at parse)
and a daily time inside the spring-forward gap. `cold` clears the zone offset tables before each
request (what alternating many zones costs), `warm` does not. A preview covers at most
PREVIEW_HORIZON_YEARS. `event_loop`: the longest stall of a 1 ms ticker while those requests run
through `off_loop` (a worker thread, as the API runs them), inline on the loop, and idle.
"""

from __future__ import annotations

import asyncio
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

from scheduler.domain import occurrences  # noqa: E402
from scheduler.domain.occurrences import MAX_GAP_YEARS, Recurrence  # noqa: E402
from scheduler.domain.policies import DstPolicy  # noqa: E402
from scheduler.domain.timing import (  # noqa: E402
    InvalidTiming,
    Timing,
    annotated_occurrences,
    check_timing,
)
from scheduler.service_layer.schedules import off_loop  # noqa: E402

CASES = [
    ("*/5 * * * *", "UTC"),
    ("0 3 * * 1-5", "Africa/Addis_Ababa"),
    ("30 2 * * *", "America/New_York"),
]
SPARSE = [("0 0 29 2 1", "UTC"), ("0 0 29 2 *", "UTC"), ("0 0 29 2 */7", "America/New_York")]
START = datetime(2026, 1, 1, tzinfo=UTC)
REPEATS = 3
# (label, cron, zones alternated request by request, dst_policy): the preview path's worst cases.
WORST = [
    ("starved", "30 2 8-14 3 */7", ("America/New_York", "America/Chicago"), DstPolicy.SKIP),
    ("feb29_sunday", "0 0 29 2 */7", ("America/New_York", "Europe/Paris"), DstPolicy.SKIP),
    ("feb29_or_monday", "0 0 29 2 1", ("America/New_York", "Europe/Paris"), DstPolicy.SKIP),
    ("never", "0 0 31 2 *", ("America/New_York", "Europe/Paris"), DstPolicy.SKIP),
    ("daily_in_gap", "30 2 * * *", ("America/New_York", "Europe/Paris"), DstPolicy.SKIP),
]
PREVIEW_COUNT = 100  # the API's maximum


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
    report["worst"] = run_worst(quick)
    return report


def _preview(cron: str, zone: str, policy: DstPolicy) -> str:
    """What `POST /v1/schedules/preview` computes (tenant limits aside); the outcome."""
    timing = Timing(
        timezone=zone,
        cron=cron,
        run_at=None,
        dst_policy=policy,
        start_at=None,
        end_at=None,
        max_runs=None,
        jitter_seconds=0,
    )
    try:
        compiled = check_timing(timing, START)
    except InvalidTiming as exc:
        return f"422 {exc.field}: {exc.reason}"
    items = annotated_occurrences(
        compiled, schedule_id="sch_bench", after=START, count=PREVIEW_COUNT
    )
    return f"200 {len(items)} items, last {items[-1].at.isoformat() if items else None}"


def _cpu_per_request(
    cron: str, zones: tuple[str, ...], policy: DstPolicy, calls: int, cold: bool
) -> tuple[float, float, str]:
    """(mean ms, max ms, last outcome) of CPU per preview, zones alternating call by call."""
    outcome = ""
    worst = 0.0
    began = time.process_time()
    for i in range(calls):
        if cold:
            occurrences._decade_transitions.cache_clear()
        one = time.process_time()
        outcome = _preview(cron, zones[i % len(zones)], policy)
        worst = max(worst, time.process_time() - one)
    mean = (time.process_time() - began) / calls
    return round(mean * 1e3, 2), round(worst * 1e3, 2), outcome


async def _loop_stall(inline: bool | None, calls: int) -> float:
    """The longest lateness (ms) of a 1 ms ticker while `calls` worst previews run (inline on
    the loop, or off it); None: no work, the machine's own noise."""
    stall = 0.0
    done = False

    async def ticker() -> None:
        nonlocal stall
        while not done:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            stall = max(stall, time.perf_counter() - before - 0.001)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    for i in range(calls):
        occurrences._decade_transitions.cache_clear()
        _label, cron, zones, policy = WORST[i % len(WORST)]
        zone = zones[i % len(zones)]
        if inline is None:
            await asyncio.sleep(0.02)
        elif inline:
            _preview(cron, zone, policy)
            await asyncio.sleep(0)
        else:
            await off_loop(_preview, cron, zone, policy)
    done = True
    await task
    return round(stall * 1e3, 1)


def run_worst(quick: bool) -> dict[str, object]:
    calls = 6 if quick else 40
    report: dict[str, object] = {
        "max_gap_years": MAX_GAP_YEARS,
        "count": PREVIEW_COUNT,
        "calls": calls,
        "unit": "ms CPU per request (mean, max)",
    }
    for label, cron, zones, policy in WORST:
        cold_mean, cold_max, outcome = _cpu_per_request(cron, zones, policy, calls, cold=True)
        warm_mean, warm_max, _ = _cpu_per_request(cron, zones, policy, calls, cold=False)
        report[label] = {
            "cron": cron,
            "zones": list(zones),
            "dst_policy": policy.value,
            "cold_ms_mean": cold_mean,
            "cold_ms_max": cold_max,
            "warm_ms_mean": warm_mean,
            "warm_ms_max": warm_max,
            "outcome": outcome,
        }
    report["event_loop"] = {
        "max_stall_ms_idle": asyncio.run(_loop_stall(None, calls)),
        "max_stall_ms_inline": asyncio.run(_loop_stall(True, calls)),
        "max_stall_ms_off_loop": asyncio.run(_loop_stall(False, calls)),
    }
    return report
