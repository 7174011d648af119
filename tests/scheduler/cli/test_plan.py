"""The plan an apply answer prints as (`+`, `~` with fields, `-`, `=`), and secrets: never
printed without --show-secrets, in the plan or in `-o json|yaml`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.entrypoints.cli_apply import print_answer
from scheduler.entrypoints.clikit.plan import has_changes, plan_lines, summary_line

ANSWER: dict[str, Any] = {
    "dry_run": False,
    "created": ["new-a", "new-b"],
    "updated": [{"key": "changed", "fields": ["cron", "labels"]}],
    "unchanged": 7,
    "deleted": ["gone"],
    "secrets": {"new-a": "whsec_c2VjcmV0LWEtc2VjcmV0LWEtc2VjcmV0LWE="},
}
NOTHING: dict[str, Any] = {
    "dry_run": True,
    "created": [],
    "updated": [],
    "unchanged": 3,
    "deleted": [],
    "secrets": {},
}


def test_plan_lines_read_like_a_diff() -> None:
    assert plan_lines(ANSWER) == [
        "+ new-a",
        "+ new-b",
        "~ changed: cron, labels",
        "- gone",
        "= 7 unchanged",
    ]
    assert plan_lines(NOTHING) == ["= 3 unchanged"]
    assert has_changes(ANSWER)
    assert not has_changes(NOTHING)
    assert has_changes({**NOTHING, "deleted": ["x"]})
    assert summary_line(ANSWER) == "2 created, 1 updated, 1 deleted"
    assert summary_line(NOTHING) == "0 to create, 0 to update, 0 to delete (dry run)"


@pytest.mark.parametrize("fmt", ["plan", "json", "yaml"])
def test_secrets_are_hidden_without_show_secrets(
    capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    print_answer(ANSWER, fmt, show_secrets=False)
    out, err = capsys.readouterr()
    assert "whsec_" not in out + err
    assert "+ new-a" in out if fmt == "plan" else "new-a" in out
    assert err.startswith("scheduler apply: 1 schedule got a generated signing secret, not printed")
    assert err.count("\n") == 1


def test_show_secrets_prints_only_the_returned_ones(capsys: pytest.CaptureFixture[str]) -> None:
    print_answer(ANSWER, "plan", show_secrets=True)
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == f"secret new-a: {ANSWER['secrets']['new-a']}"
    assert out.count("whsec_") == 1
    assert err == ""
    print_answer(ANSWER, "json", show_secrets=True)
    assert json.loads(capsys.readouterr().out)["secrets"] == ANSWER["secrets"]


def test_no_secret_no_note(capsys: pytest.CaptureFixture[str]) -> None:
    print_answer(NOTHING, "plan", show_secrets=False)
    out, err = capsys.readouterr()
    assert out == "= 3 unchanged\n0 to create, 0 to update, 0 to delete (dry run)\n"
    assert err == ""
