"""The `scheduler` CLI against a real API (conftest: `serve --dev` on loopback): apply a
directory, diff it (exit 0/1), change and prune, the plan's lines, secrets hidden unless asked,
`schedules …` in every output format, and one-line refusals (422 naming file and document, 401,
no server) with exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.entrypoints.cli import main
from tests.scheduler.cli.conftest import Api
from tests.support.processes import free_port

Capture = pytest.CaptureFixture[str]


def _files(root: Path, *, nightly_cron: str = "0 3 * * *", with_cleanup: bool = True) -> Path:
    root.mkdir(exist_ok=True)
    (root / "a.yaml").write_text(
        "key: nightly\nname: nightly report\n"
        f"cron: '{nightly_cron}'\ntimezone: Africa/Addis_Ababa\n"
        "target: {url: 'https://example.com/hook'}\nlabels: {team: ops, env: prod}\n"
        "---\n"
        "key: hourly\nname: hourly sync\ncron: '@hourly'\ntimezone: UTC\naction: event\n"
        "labels: {team: ops}\n"
    )
    cleanup = [
        {
            "key": "cleanup",
            "name": "cleanup",
            "cron": "*/15 * * * *",
            "timezone": "UTC",
            "action": "event",
            "labels": {"team": "ops"},
        }
    ]
    (root / "b.json").write_text(json.dumps({"schedules": cleanup if with_cleanup else []}))
    return root


def _run(capsys: Capture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_apply_diff_change_and_prune(tenant: str, tmp_path: Path, capsys: Capture) -> None:
    defs = _files(tmp_path / "defs")
    code, out, err = _run(capsys, "diff", "-f", str(defs))
    assert (code, out) == (1, "+ nightly\n+ hourly\n+ cleanup\n= 0 unchanged\n"), err

    code, out, err = _run(capsys, "apply", "-f", str(defs))
    assert code == 0, err
    assert out.splitlines() == [
        "+ nightly",
        "+ hourly",
        "+ cleanup",
        "= 0 unchanged",
        "3 created, 0 updated, 0 deleted",
    ]
    assert "whsec_" not in out + err
    assert "1 schedule got a generated signing secret, not printed" in err  # the webhook's

    assert _run(capsys, "diff", "-f", str(defs)) == (0, "= 3 unchanged\n", "")
    code, out, _ = _run(capsys, "apply", "-f", str(defs))
    assert (code, out.splitlines()[0]) == (0, "= 3 unchanged")

    _files(defs, nightly_cron="30 4 * * *", with_cleanup=False)
    code, out, _ = _run(capsys, "diff", "-f", str(defs), "--prune-label", "team=ops")
    assert (code, out) == (1, "~ nightly: cron\n- cleanup\n= 1 unchanged\n")
    code, out, _ = _run(capsys, "apply", "-f", str(defs), "--prune-label", "team=ops")
    assert code == 0
    assert out.splitlines()[:3] == ["~ nightly: cron", "- cleanup", "= 1 unchanged"]

    code, out, _ = _run(capsys, "schedules", "list", "-o", "json")
    listed = json.loads(out)
    assert code == 0
    assert sorted(s["key"] for s in listed) == ["hourly", "nightly"]
    assert next(s for s in listed if s["key"] == "nightly")["cron"] == "30 4 * * *"


def test_dry_run_changes_nothing_and_show_secrets_prints_the_created_ones(
    tenant: str, tmp_path: Path, capsys: Capture
) -> None:
    defs = _files(tmp_path / "defs")
    code, out, _ = _run(capsys, "apply", "-f", str(defs), "--dry-run")
    assert code == 0
    assert out.splitlines()[-1] == "3 to create, 0 to update, 0 to delete (dry run)"
    assert _run(capsys, "schedules", "list", "-o", "json")[1] == "[]\n"

    code, out, err = _run(capsys, "apply", "-f", str(defs), "--show-secrets")
    secrets = [line for line in out.splitlines() if line.startswith("secret ")]
    assert code == 0
    assert len(secrets) == 1
    assert err == ""
    assert secrets[0].startswith("secret nightly: whsec_")


def test_schedules_commands(tenant: str, tmp_path: Path, capsys: Capture) -> None:
    assert _run(capsys, "apply", "-f", str(_files(tmp_path / "defs")))[0] == 0

    code, out, _ = _run(capsys, "schedules", "list", "--label", "env=prod", "--label", "team")
    header, *rows = out.splitlines()
    assert code == 0
    assert header.split() == [
        "ID",
        "KEY",
        "NAME",
        "STATE",
        "SCHEDULE",
        "NEXT",
        "RUN",
        "LABELS",
    ]
    assert len(rows) == 1
    assert " nightly " in rows[0]
    assert "env=prod,team=ops" in rows[0]
    assert "0 3 * * * Africa/Addis_Ababa" in rows[0]

    code, out, _ = _run(capsys, "schedules", "get", "key:nightly", "-o", "yaml")
    got = yaml.safe_load(out)
    assert code == 0
    assert got["key"] == "nightly"
    assert got["next_run_at"].endswith("Z")
    schedule_id = got["id"]
    code, out, _ = _run(capsys, "schedules", "get", schedule_id, "-o", "json")
    assert json.loads(out)["id"] == schedule_id

    code, out, _ = _run(capsys, "schedules", "pause", "key:hourly", "--reason", "maintenance")
    assert code == 0
    assert " paused " in out
    code, out, _ = _run(capsys, "schedules", "resume", "key:hourly", "-o", "json")
    assert json.loads(out)["state"] == "active"

    code, out, _ = _run(capsys, "schedules", "trigger", "key:hourly", "-o", "json")
    run = json.loads(out)
    assert code == 0
    assert run["trigger"] == "manual"
    code, out, _ = _run(capsys, "schedules", "runs", "key:hourly", "-o", "json")
    assert [r["id"] for r in json.loads(out)] == [run["id"]]
    code, out, _ = _run(capsys, "schedules", "replay", "key:hourly", run["id"], "-o", "json")
    assert code == 0
    assert json.loads(out)["trigger"] == "replay"

    code, out, _ = _run(capsys, "schedules", "delete", "key:cleanup")
    assert code == 0
    assert out.startswith("deleted sch_")
    code, _, err = _run(capsys, "schedules", "get", "key:cleanup")
    assert (code, err) == (2, "scheduler schedules get: no schedule has the key 'cleanup'\n")


def test_create_and_update_from_files(tenant: str, tmp_path: Path, capsys: Capture) -> None:
    f = tmp_path / "one.yaml"
    f.write_text(
        "name: one\ncron: '@daily'\ntimezone: UTC\ntarget: {url: 'https://example.com/h'}\n"
    )
    code, out, err = _run(capsys, "schedules", "create", "-f", str(f), "-o", "json")
    created: dict[str, Any] = json.loads(out)
    assert code == 0
    assert "secret" not in created
    assert "whsec_" not in out + err
    assert "signing secret the API returned is not printed" in err
    code, out, _ = _run(capsys, "schedules", "create", "-f", str(f), "--show-secrets")
    assert code == 0
    assert out.splitlines()[-1].startswith("secret: whsec_")

    patch = tmp_path / "patch.json"
    patch.write_text('{"cron": "0 5 * * *", "labels": {"team": "data"}}')
    code, out, _ = _run(
        capsys, "schedules", "update", created["id"], "-f", str(patch), "-o", "json"
    )
    assert code == 0
    assert json.loads(out)["cron"] == "0 5 * * *"


def test_an_invalid_definition_names_its_file_and_document(
    tenant: str, tmp_path: Path, capsys: Capture
) -> None:
    defs = _files(tmp_path / "defs")
    (defs / "c.yaml").write_text(
        "key: bad\nname: bad\ncron: '61 * * * *'\ntimezone: UTC\naction: event\n"
    )
    code, out, err = _run(capsys, "apply", "-f", str(defs))
    first, *rest = err.splitlines()
    assert (code, out) == (2, "")
    assert first.startswith("scheduler apply: schedules"), err
    assert "cron" in first, err
    assert any(f"{defs / 'c.yaml'}: document 1" in line for line in [first, *rest]), err
    assert _run(capsys, "schedules", "list", "-o", "json")[1] == "[]\n"  # all or nothing
    assert _run(capsys, "diff", "-f", str(defs))[0] == 2


def test_a_bad_file_is_one_line_and_exit_2(tenant: str, tmp_path: Path, capsys: Capture) -> None:
    f = tmp_path / "schedules.yaml"
    f.write_text("key: a\n---\nkey: b\n---\nname: c\n")
    for command in ("apply", "diff"):
        code, out, err = _run(capsys, command, "-f", str(f))
        assert (code, out) == (2, "")
        assert err == f"scheduler {command}: {f}: document 3: 'key' is required\n"


def test_refusals_are_one_line(
    api: Api, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SCHEDULER_TOKEN", raising=False)
    code, out, err = _run(capsys, "schedules", "list", "--url", api.url)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith("scheduler schedules list: "), err
    assert "token" in err.lower(), err

    dead = f"http://127.0.0.1:{free_port()}"
    code, out, err = _run(
        capsys, "diff", "-f", str(_files(tmp_path / "d")), "--url", dead, "--token", "x"
    )
    assert (code, out) == (2, "")
    assert err.startswith(f"scheduler diff: cannot connect to {dead}")
    assert err.count("\n") == 1

    token = api.token("refusals")
    code, _, err = _run(capsys, "schedules", "get", "sch_nope", "--url", api.url, "--token", token)
    assert code == 2
    assert err.count("\n") == 1
    assert "not found" in err


def test_ledger_and_versions_are_thin(tenant: str, tmp_path: Path, capsys: Capture) -> None:
    assert _run(capsys, "apply", "-f", str(_files(tmp_path / "defs")))[0] == 0
    for command in ("ledger", "versions"):
        code, out, err = _run(capsys, "schedules", command, "key:hourly", "-o", "json")
        if code == 0:
            assert isinstance(json.loads(out), dict)  # the server has the operation
        else:
            assert code == 2
            assert err.count("\n") == 1
            assert "not supported by this server" in err


def test_list_follows_pages_up_to_its_limit(tenant: str, tmp_path: Path, capsys: Capture) -> None:
    many = [
        {
            "key": f"k{i:03}",
            "name": f"n{i}",
            "cron": "@daily",
            "timezone": "UTC",
            "action": "event",
            "labels": {"batch": "many"},
        }
        for i in range(130)
    ]
    (tmp_path / "many.json").write_text(json.dumps(many))
    code, out, err = _run(capsys, "apply", "-f", str(tmp_path / "many.json"))
    assert code == 0, err
    assert out.splitlines()[-1] == "130 created, 0 updated, 0 deleted"

    code, out, err = _run(capsys, "schedules", "list", "--label", "batch=many", "-o", "json")
    assert code == 0
    assert sorted(s["key"] for s in json.loads(out)) == [d["key"] for d in many]
    assert err == ""
    code, out, err = _run(capsys, "schedules", "list", "--limit", "110")
    assert code == 0
    assert len(out.splitlines()) == 1 + 110  # the header and 110 rows
    assert err == "(more than 110 items: raise --limit to see more)\n"
