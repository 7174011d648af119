"""The alerting rules pass `promtool check rules`, their unit tests pass `promtool test rules`,
every alert has series that fire it and series that must not, and the dashboard's queries are
valid PromQL (checked by promtool as recording rules)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.observability.references import (
    RULE_TESTS,
    RULES,
    dashboard_exprs,
    promtool,
    rule_groups,
)

PROMTOOL_TIMEOUT_SECONDS = 60


def run_promtool(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [promtool(), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_SECONDS,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_rules_pass_promtool_check() -> None:
    out = run_promtool("check", "rules", RULES.name, cwd=RULES.parent)
    rules = sum(len(g["rules"]) for g in rule_groups())
    assert f"SUCCESS: {rules} rules found" in out


def test_rule_unit_tests_pass() -> None:
    out = run_promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert "SUCCESS" in out


def test_unit_tests_fail_when_a_rule_breaks(tmp_path: Path) -> None:
    # The unit tests must depend on the rules: loosen one threshold and promtool must object.
    broken = RULES.read_text().replace(
        "scheduler:run_lag_seconds:p99_5m > 1", "scheduler:run_lag_seconds:p99_5m > 5"
    )
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    done = subprocess.run(
        [promtool(), "test", "rules", RULE_TESTS.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_SECONDS,
    )
    assert done.returncode != 0
    assert "SchedulerRunLagHigh" in done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts = {r["alert"] for g in rule_groups() for r in g["rules"] if "alert" in r}
    assert len(alerts) == 12
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    fires = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert alerts <= fires, f"never shown to fire: {sorted(alerts - fires)}"
    assert alerts <= quiet, f"never shown to stay quiet: {sorted(alerts - quiet)}"


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    # Grafana variables become what "All" selects; label_values() is Grafana's, not PromQL.
    queries = [
        e.replace("$job", ".*").replace("$__rate_interval", "5m")
        for e in exprs
        if not e.startswith("label_values(")
    ]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"dashboard:q{i}", "expr": q} for i, q in enumerate(queries)],
            }
        ]
    }
    (tmp_path / "dashboard_rules.yml").write_text(yaml.safe_dump(rules))
    out = run_promtool("check", "rules", "dashboard_rules.yml", cwd=tmp_path)
    assert f"SUCCESS: {len(queries)} rules found" in out
