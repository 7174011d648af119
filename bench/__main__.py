"""`python -m bench [NAME ...] [--quick]`: run the benchmark modules and print one JSON document.

Every module `bench/<name>_bench.py` exposes `run(quick: bool) -> dict`; figures are reported side
by side with their baselines from the same run, because this machine is noisy (use the ratios).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("names", nargs="*", help="benchmark names (default: all)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    here = Path(__file__).parent
    available = sorted(
        m.name.removesuffix("_bench")
        for m in pkgutil.iter_modules([str(here)])
        if m.name.endswith("_bench")
    )
    names = args.names or available
    unknown = [n for n in names if n not in available]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {available}", file=sys.stderr)
        return 2
    report: dict[str, object] = {}
    for name in names:
        module = importlib.import_module(f"bench.{name}_bench")
        started = time.perf_counter()
        result = module.run(quick=args.quick)
        result["wall_seconds"] = round(time.perf_counter() - started, 2)
        report[name] = result
        print(f"bench {name}: done", file=sys.stderr)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
