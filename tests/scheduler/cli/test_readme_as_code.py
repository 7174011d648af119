"""README's "Schedules as code" works as written: its YAML file, `scheduler diff`, `scheduler
apply --prune-label`, `scheduler schedules list` and the Python client's block, against a real API
(conftest: `serve --dev` on loopback)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.entrypoints.cli import main

ROOT = Path(__file__).resolve().parents[3]
Capture = pytest.CaptureFixture[str]


def _section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("## Schedules as code", 1)[1].split("\n## ", 1)[0]


def _block(lang: str) -> str:
    found = re.search(rf"```{lang}\n(.*?)```", _section(), re.S)
    assert found, f"no {lang} block in the README's schedules-as-code section"
    return found.group(1)


def _commands() -> list[list[str]]:
    """The `scheduler …` lines of the sh block, as argv (comments dropped)."""
    lines = [line.split("#", 1)[0].split() for line in _block("sh").splitlines()]
    return [words[1:] for words in lines if words and words[0].endswith("/scheduler")]


def _run(capsys: Capture, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code != 2, err
    return code, out


def test_the_readme_file_diff_apply_and_list(
    tenant: str, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "schedules").mkdir()
    (tmp_path / "schedules" / "billing.yaml").write_text(_block("yaml"))
    monkeypatch.chdir(tmp_path)
    diff, apply, listing = _commands()
    assert diff[0] == "diff"
    assert apply[0] == "apply"
    assert listing[:2] == ["schedules", "list"]

    assert _run(capsys, diff) == (
        1,
        "+ billing/nightly-invoices\n+ billing/hourly-sync\n= 0 unchanged\n",
    )
    code, out = _run(capsys, apply)
    assert code == 0
    assert out.splitlines()[:3] == [
        "+ billing/nightly-invoices",
        "+ billing/hourly-sync",
        "= 0 unchanged",
    ]
    assert "whsec_" not in out  # the generated secret is not printed without --show-secrets
    assert _run(capsys, diff) == (0, "= 2 unchanged\n")
    code, out = _run(capsys, listing)
    assert code == 0
    assert "billing/nightly-invoices" in out
    assert "billing/hourly-sync" in out

    # The Python block: the same file through the client, a dry run that finds nothing to do.
    proc = subprocess.run(
        [sys.executable, "-c", _block("python")],
        cwd=tmp_path,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    first, *schedules = proc.stdout.splitlines()
    assert first == "[] [] [] 2"
    assert sorted(line.split()[0] for line in schedules) == [
        "billing/hourly-sync",
        "billing/nightly-invoices",
    ]
