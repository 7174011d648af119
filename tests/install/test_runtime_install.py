"""`make run` installs the runtime only; the dev extra (test tools, the browser driver, the
analytics engines: over 1 GB) comes with `make test` / `lint` / `bench`.

Checked without building a venv (slow and networky on every run): the runtime dependency
closure of pyproject's `dependencies`, followed through the installed distributions' metadata,
holds no package of the dev extra; and `make -n run` installs without it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def dev_extra() -> set[str]:
    return {
        canonicalize_name(Requirement(r).name) for r in _project()["optional-dependencies"]["dev"]
    }


def runtime_closure() -> set[str]:
    """Names reachable from pyproject's `dependencies` (no extra of ours) through the installed
    distributions' metadata; the extras a requirement asks for (`sqlalchemy[asyncio]`) are
    followed."""
    seen: set[str] = set()
    todo = [_wanted(Requirement(line), frozenset()) for line in _project()["dependencies"]]
    pending = [t for t in todo if t is not None]
    while pending:
        name, extras = pending.pop()
        key = f"{canonicalize_name(name)}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency of a dependency that this venv does not have
        for line in dist.requires or []:
            wanted = _wanted(Requirement(line), extras)
            if wanted is not None:
                pending.append(wanted)
    return {key.split("[")[0] for key in seen}


def _wanted(req: Requirement, extras: frozenset[str]) -> tuple[str, frozenset[str]] | None:
    """The requirement when this platform and the extras asked of its dependent select it."""
    if req.marker is not None and not any(
        req.marker.evaluate({**default_environment(), "extra": extra}) for extra in (extras or {""})
    ):
        return None
    return req.name, frozenset(req.extras)


def test_runtime_closure_has_no_dev_package() -> None:
    closure = runtime_closure()
    assert {"fastapi", "structlog"} <= closure  # the walk found the runtime
    assert closure & dev_extra() == set()
    heavy = {"chdb", "pyarrow", "pandas", "playwright", "kubernetes-validate", "mypy", "pytest"}
    assert closure & heavy == set()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_installs_the_runtime_only(tmp_path: Path) -> None:
    # A dry run against a copy of the Makefile in an empty directory: no stamp exists, so every
    # install step is printed, nothing runs.
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    run = subprocess.run(
        ["make", "-n", "run"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    installs = [line for line in run.splitlines() if re.search(r"pip install .*-e", line)]
    assert installs, run
    assert not any("[dev]" in line for line in installs), run
    test = subprocess.run(
        ["make", "-n", "test"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert any('-e ".[dev]"' in line for line in test.splitlines()), test
