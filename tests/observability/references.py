"""What the shipped alerts (deploy/prometheus) and dashboard (deploy/grafana) reference, and the
promtool they are checked with."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "scheduler-platform.json"

# Every metric of ours starts with its service's name; recording rules contain a colon.
_OUR_NAME = re.compile(r"\b(?:scheduler|notification)[a-zA-Z0-9_:]*")
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("_count", "_sum"),
}


def promtool() -> str:
    """The promtool binary; missing it fails where CI requires it, and skips elsewhere."""
    path = shutil.which("promtool")
    if path is not None:
        return path
    message = (
        "promtool not found: install Debian's prometheus package "
        "(apt-get install -y --no-install-recommends prometheus; .ci/run does)"
    )
    if os.environ.get("CI") == "true" or os.environ.get("REQUIRE_PROMTOOL") == "1":
        pytest.fail(message)
    pytest.skip(message)


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def rule_exprs() -> list[str]:
    return [r["expr"] for g in rule_groups() for r in g["rules"]]


def recorded_names() -> set[str]:
    return {r["record"] for g in rule_groups() for r in g["rules"] if "record" in r}


def dashboard_exprs() -> list[str]:
    def walk(panels: list[dict[str, Any]]) -> list[str]:
        out: list[str] = []
        for panel in panels:
            out += [t["expr"] for t in panel.get("targets", [])]
            out += walk(panel.get("panels", []))
        return out

    dashboard = json.loads(DASHBOARD.read_text())
    exprs = walk(dashboard["panels"])
    exprs += [
        v["query"]["query"]
        for v in dashboard["templating"]["list"]
        if isinstance(v.get("query"), dict)
    ]
    return exprs


def metric_names(exprs: list[str]) -> set[str]:
    """Our metric names in PromQL expressions (label names such as tenant_id never start with
    a service name; recording rules are left out: alerts.yml defines them)."""
    return {m for e in exprs for m in _OUR_NAME.findall(e) if ":" not in m}


def recording_refs(exprs: list[str]) -> set[str]:
    """Recording-rule names (with a colon) used in the expressions."""
    return {m for e in exprs for m in _OUR_NAME.findall(e) if ":" in m}


def exported_names(families: list[Any]) -> set[str]:
    """The sample names /metrics can carry, from each family's type: a counter `x` is queried as
    `x_total`, a histogram as `x_bucket`/`x_count`/`x_sum`; gauges by their own name. By type,
    not by samples, so a labelled counter nobody incremented yet still counts as exported."""
    names: set[str] = set()
    for family in families:
        names.update(family.name + s for s in _SUFFIXES.get(family.type, ("",)))
    return names
