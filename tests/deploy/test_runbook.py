"""docs/operations.md names only real things: console-script subcommands and flags (parsed by the
scripts' own argparse definitions), settings the config classes read, API routes with their
methods, repository paths, Kubernetes objects of the rendered overlays, tables and metrics."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from collections.abc import Iterator

import pytest
from fastapi import APIRouter

from tests.deploy.rendered import (
    OVERLAYS,
    ROOT,
    RUNBOOK,
    env_names,
    render,
    runbook_code,
)

SETTING = re.compile(
    r"\b(?:SCHEDULER|NOTIFICATION|AUTH|KAFKA|WEBHOOK|LOG)_[A-Z0-9_]*[A-Z0-9]\b(?!_?\*)"
)
PATH = re.compile(r"/v1/[A-Za-z0-9_\-/{}$-]*")
METHOD_PATH = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) (/v1/[A-Za-z0-9_\-/{}$]*)")


def _text() -> str:
    return RUNBOOK.read_text()


def _inline_code() -> list[str]:
    return re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", _text(), flags=re.S))


def _shell_lines(inline: bool = True) -> Iterator[list[str]]:
    for line in [*runbook_code().splitlines(), *(_inline_code() if inline else [])]:
        line = line.split(" #", 1)[0]
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            yield list(lexer)
        except ValueError:  # an unbalanced quote in prose, not a command
            continue


def _invocations(inline: bool) -> list[tuple[str, list[str]]]:
    """(script, argv) of every `scheduler …` / `notification …` command line: the script at the
    start of a command (after `--`, a pipe, `&&`, `;` or `(`); with `inline`, also the ones
    quoted in the prose."""
    found = []
    for tokens in _shell_lines(inline):
        for i, token in enumerate(tokens):
            if token not in ("scheduler", "notification"):
                continue
            before = tokens[i - 1] if i else None
            if before not in (None, "--", "|", "&&", ";", "(", "$("):
                continue
            argv = []
            for t in tokens[i + 1 :]:
                if t in ("|", "&&", ";", ")", ">", "&"):
                    break
                argv.append(t)
            if argv:  # a bare `notification` is the workload's name, not a command
                found.append((token, argv))
    return found


def _parser(script: str, subcommand: str) -> argparse.ArgumentParser:
    cli = importlib.import_module(f"{script}.entrypoints.cli")
    assert subcommand in cli.SUBCOMMANDS, f"{script} {subcommand}: no such subcommand"
    module_name, _ = cli.SUBCOMMANDS[subcommand]
    parser = argparse.ArgumentParser(prog=f"{script} {subcommand}", exit_on_error=False)
    importlib.import_module(f"{script}.entrypoints.{module_name}").add_arguments(parser)
    return parser


def _parse(script: str, argv: list[str]) -> None:
    parser = _parser(script, argv[0])
    try:
        parser.parse_args(argv[1:])
    except (argparse.ArgumentError, SystemExit) as exc:
        raise AssertionError(f"`{script} {' '.join(argv)}` does not parse: {exc}") from exc


def test_every_console_script_command_parses() -> None:
    for script, argv in _invocations(inline=False):
        _parse(script, argv)


def test_every_console_script_mention_names_real_flags() -> None:
    invocations = _invocations(inline=True)
    # The runbook shows at least these: serving both roles, migrating, minting a dev token.
    shown = {(s, a[0]) for s, a in invocations}
    assert {
        ("scheduler", "serve"),
        ("scheduler", "migrate"),
        ("scheduler", "token"),
        ("notification", "serve"),
        ("notification", "migrate"),
    } <= shown
    for script, argv in invocations:
        options = _parser(script, argv[0])._option_string_actions
        for flag in (a for a in argv[1:] if a.startswith("--")):
            assert flag.split("=")[0] in options, f"{script} {argv[0]} has no {flag}"


def test_every_setting_named_exists() -> None:
    known = env_names("scheduler") | env_names("notification")
    named = set(SETTING.findall(_text()))
    assert named, "the runbook names settings"
    unknown = named - known
    assert not unknown, f"the runbook names settings nothing reads: {sorted(unknown)}"


def _routes() -> list[tuple[set[str], re.Pattern[str]]]:
    modules = [
        "scheduler.entrypoints.api.schedules",
        "scheduler.entrypoints.api.apply",
        "scheduler.entrypoints.api.runs",
        "scheduler.entrypoints.api.backfill",
        "scheduler.entrypoints.api.versions",
        "scheduler.entrypoints.api.ledger",
        "scheduler.entrypoints.api.completion",
        "scheduler.entrypoints.api.destinations",
        "notification.entrypoints.api.subscriptions",
        "notification.entrypoints.api.alert_contacts",
        "notification.entrypoints.api.notifications",
    ]
    routes = []
    for name in modules:
        module = importlib.import_module(name)
        # Every router a module declares (subscriptions has its deliveries on a second one).
        routers = [r for r in vars(module).values() if isinstance(r, APIRouter)]
        for route in (route for router in routers for route in router.routes):
            pattern = re.sub(r"\{[^/]+\}", "[^/]+", route.path.rstrip("/"))
            routes.append((set(route.methods), re.compile(pattern + "/?")))
    return routes


def _matches(path: str, method: str | None) -> bool:
    concrete = re.sub(r"\$\{?[A-Za-z_]+\}?", "x", path.split("?")[0])
    return any(
        rx.fullmatch(concrete) and (method is None or method in methods)
        for methods, rx in _routes()
    )


def test_every_api_route_named_exists_with_its_method() -> None:
    text = _text()
    pairs = METHOD_PATH.findall(text)
    assert len(pairs) >= 5
    for method, path in pairs:
        assert _matches(path, method), f"{method} {path} is not a route"
    for tokens in _shell_lines():
        if "curl" not in tokens:
            continue
        method = tokens[tokens.index("-X") + 1] if "-X" in tokens else "GET"
        for token in tokens:
            for path in PATH.findall(token):
                assert _matches(path, method), f"curl {method} {path} is not a route"
    for path in PATH.findall(text):
        assert _matches(path, None), path


def test_every_repository_path_exists() -> None:
    paths = set(
        re.findall(
            r"(?<![\w/])(?<!exec )((?:deploy|docs|pkg|services|tests)/[A-Za-z0-9_./-]+)", _text()
        )
    )
    assert paths
    for path in paths:
        assert (ROOT / path.rstrip(".")).exists(), path


def _objects() -> set[tuple[str, str]]:
    objects = set()
    for overlay in OVERLAYS:
        for part in ("", "/migrate"):
            for d in render(f"overlays/{overlay}{part}"):
                objects.add((d["kind"].lower(), d["metadata"]["name"]))
    return objects


ALIASES = {
    "deploy": "deployment",
    "deployment": "deployment",
    "job": "job",
    "svc": "service",
    "hpa": "horizontalpodautoscaler",
}


def test_every_kubernetes_object_named_exists() -> None:
    objects = _objects()
    refs = re.findall(r"(?<![\w/])(deploy|deployment|job|svc)/([a-z0-9-]+)(?![a-z0-9/-])", _text())
    refs += [("hpa", n) for n in re.findall(r"\bhpa ([a-z0-9-]+)", _text())]
    assert len(refs) >= 8
    for kind, name in refs:
        assert (ALIASES[kind], name) in objects, f"{kind}/{name}"
    # `kubectl create secret generic NAME` names are what the pods' envFrom read: checked in
    # test_manifests; `-n NAMESPACE` names the overlays' namespaces.
    namespaces = {n for k, n in objects if k == "namespace"}
    for ns in re.findall(r"kubectl -n ([a-z0-9-]+)", _text()):
        assert ns in namespaces, ns
    for target in re.findall(r"kubectl apply -k (\S+)", runbook_code()):
        assert (ROOT / target).is_dir()
        assert (ROOT / target / "kustomization.yaml").exists()


def test_every_table_and_metric_named_exists() -> None:
    importlib.import_module("scheduler.adapters.db.tables")
    # tenant_status and processed_events join the metadata when their module is imported:
    # import it here, so the test does not depend on which tests ran before it.
    importlib.import_module("scheduler.adapters.db.tenant_store")
    from notification.adapters.tables import metadata as notification_tables
    from scheduler.adapters.db.tables import metadata as scheduler_tables

    tables = set(scheduler_tables.tables) | set(notification_tables.tables)
    # The analytics section queries the ClickHouse tables defined under deploy/clickhouse.
    for sql in (ROOT / "deploy").rglob("*.sql"):
        tables |= {
            name.rsplit(".", 1)[-1]
            for name in re.findall(
                r"CREATE (?:TABLE|MATERIALIZED VIEW|VIEW)(?: IF NOT EXISTS)? ([\w.]+)",
                sql.read_text(),
                re.I,
            )
        }
    for table in re.findall(r"\bFROM ([\w.]+)", _text()):
        assert table.rsplit(".", 1)[-1] in tables, table
    source = "\n".join(p.read_text() for d in ("services", "pkg") for p in (ROOT / d).rglob("*.py"))
    metrics = {
        m
        for m in _inline_code()
        if re.fullmatch(r"(scheduler|notification)_[a-z_]+", m) and not m.endswith("_db")
    }
    assert metrics
    for metric in metrics:
        base = re.sub(r"_(total|bucket|count|sum|created)$", "", metric)
        # prometheus-client takes a counter's name with or without `_total`; shared code names
        # its metrics after the service's prefix (f"{prefix}_ready").
        rest = [m.split("_", 1)[1] for m in (base, metric)]
        spellings = [f'"{base}"', f'"{metric}"', *(f'}}_{r}"' for r in rest)]
        assert any(s in source for s in spellings), f"no metric {metric}"


@pytest.mark.parametrize(
    "heading",
    [
        "## Alerts and dashboard",
        "## Run analytics (ClickHouse)",
        "## Deploy",
        "## Roll back",
        "## Scale",
        "## Rotate keys",
        "## PostgreSQL failover and outage",
        "## Kafka outage",
        "## Catching up after downtime",
        "## Replaying dead letters",
    ],
)
def test_runbook_has_each_section(heading: str) -> None:
    assert f"\n{heading}\n" in _text()
