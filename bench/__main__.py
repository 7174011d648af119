"""`python -m bench [NAME ...] [--quick] [--baseline REV] [OPTIONS]`: run the benchmark modules and
print one JSON document.

Every module `bench/<name>_bench.py` exposes `run(quick: bool) -> dict`; figures are reported side
by side with their baselines from the same run, because this machine is noisy (use the ratios).
A module whose `run` also takes `argv` accepts options of its own (`scale --herd 10000`): the
arguments this parser does not know go to it, and naming another module with them is an error.

`--baseline REV` measures a refactor: REV is checked out into a temporary git worktree and every
named benchmark runs there and here in turn (baseline first, each in a fresh subprocess, so
neither inherits the other's warm caches or memory), and the document holds
`{name: {"baseline": {...}, "current": {...}}}` with the baseline's commit.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import pkgutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
ROOT = HERE.parent
# One benchmark in a subprocess may take this long before it is abandoned (seconds).
SUBPROCESS_TIMEOUT_SECONDS = 1_800


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("names", nargs="*", help="benchmark names (default: all)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--baseline", metavar="REV", help="also run each benchmark on this git revision"
    )
    args, extra = parser.parse_known_args()
    available = _available(HERE)
    names = args.names or available
    unknown = [n for n in names if n not in available]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {available}", file=sys.stderr)
        return 2
    if extra:
        plain = [n for n in names if not _takes_argv(n)]
        if plain:
            print(f"{plain} take no options (given {extra})", file=sys.stderr)
            return 2
    if args.baseline:
        report = _compare(names, args.baseline, quick=args.quick, extra=extra)
    else:
        report = {name: _run_here(name, quick=args.quick, extra=extra) for name in names}
    print(json.dumps(report, indent=2))
    return 0


def _available(folder: Path) -> list[str]:
    return sorted(
        m.name.removesuffix("_bench")
        for m in pkgutil.iter_modules([str(folder)])
        if m.name.endswith("_bench")
    )


def _takes_argv(name: str) -> bool:
    module = importlib.import_module(f"bench.{name}_bench")
    return "argv" in inspect.signature(module.run).parameters


def _run_here(name: str, *, quick: bool, extra: list[str]) -> dict[str, Any]:
    module = importlib.import_module(f"bench.{name}_bench")
    started = time.perf_counter()
    options: dict[str, Any] = {"argv": extra} if extra else {}
    result: dict[str, Any] = module.run(quick=quick, **options)
    result["wall_seconds"] = round(time.perf_counter() - started, 2)
    print(f"bench {name}: done", file=sys.stderr)
    return result


def _compare(names: list[str], rev: str, *, quick: bool, extra: list[str]) -> dict[str, Any]:
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}").strip()
    report: dict[str, Any] = {"baseline_commit": commit}
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        _git("worktree", "add", "--detach", str(tree), commit)
        try:
            baseline_names = set(_available(tree / "bench"))
            for name in names:
                entry: dict[str, Any] = {}
                # New since the baseline: nothing to compare with.
                sides = [("baseline", tree)] if name in baseline_names else []
                for side, where in [*sides, ("current", ROOT)]:
                    try:
                        entry[side] = _run_in(where, name, quick=quick, extra=extra)
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:
                        entry[side] = {"error": str(exc)[-3000:]}  # the others still run
                report[name] = entry
                print(f"bench {name}: baseline and current done", file=sys.stderr)
        finally:
            _git("worktree", "remove", "--force", str(tree))
    return report


def _run_in(tree: Path, name: str, *, quick: bool, extra: list[str]) -> dict[str, Any]:
    """One benchmark of the code in `tree`, in a fresh interpreter whose imports resolve there."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(tree / p) for p in ("pkg", "services", ".")),
    }
    argv = [sys.executable, "-m", "bench", name, *(["--quick"] if quick else []), *extra]
    done = subprocess.run(
        argv,
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench {name} in {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)[name]
    return result


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


if __name__ == "__main__":
    raise SystemExit(main())
