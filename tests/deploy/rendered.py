"""What the deploy tests read: the overlays rendered by the real `kubectl kustomize` (offline),
the Dockerfile's instructions, the environment names the services' config classes read, and the
runbook's code blocks."""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE_ROOT = ROOT / "deploy" / "kubernetes"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
RUNBOOK = ROOT / "docs" / "operations.md"
OVERLAYS = ("production", "dev")
# Each overlay and the migrations rendered beside it (applied first).
RENDERINGS = tuple(f"overlays/{o}{part}" for o in OVERLAYS for part in ("", "/migrate"))

Doc = dict[str, Any]


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        raise AssertionError(
            "kubectl not found: the manifests are rendered with `kubectl kustomize`"
        )
    return found


@functools.cache
def render(path: str) -> tuple[Doc, ...]:
    """`kubectl kustomize deploy/kubernetes/<path>`: every document it prints."""
    out = subprocess.run(
        [kubectl(), "kustomize", str(KUSTOMIZE_ROOT / path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def of_kind(docs: tuple[Doc, ...], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    (doc,) = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    return doc


def pod_specs(docs: tuple[Doc, ...]) -> Iterator[tuple[Doc, Doc]]:
    """(workload, pod spec) of every Deployment and Job."""
    for d in docs:
        if d["kind"] in ("Deployment", "Job"):
            yield d, d["spec"]["template"]["spec"]


def config_maps(docs: tuple[Doc, ...]) -> dict[str, dict[str, str]]:
    return {d["metadata"]["name"]: d.get("data", {}) for d in of_kind(docs, "ConfigMap")}


def env_from_config_maps(docs: tuple[Doc, ...], container: Doc) -> dict[str, str]:
    """The variables a container gets from ConfigMaps (envFrom and valueFrom)."""
    maps = config_maps(docs)
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(maps[source["configMapRef"]["name"]])
    for var in container.get("env", []):
        ref = var.get("valueFrom", {}).get("configMapKeyRef")
        if ref:
            env[var["name"]] = maps[ref["name"]][ref["key"]]
    return env


def secret_refs(container: Doc) -> list[str]:
    return [s["secretRef"]["name"] for s in container.get("envFrom", []) if "secretRef" in s]


# --- the services' configuration -----------------------------------------------------------


def _alias_names(alias: object) -> set[str]:
    if alias is None:
        return set()
    if isinstance(alias, str):
        return {alias.upper()}
    choices = getattr(alias, "choices", [])
    return {c.upper() for c in choices if isinstance(c, str)}


def settings_class(service: str) -> type[BaseSettings]:
    from notification.config import NotificationSettings
    from scheduler.config import SchedulerSettings

    if service == "scheduler":
        return SchedulerSettings
    assert service == "notification", service
    return NotificationSettings


@functools.cache
def env_names(service: str) -> frozenset[str]:
    """Every environment variable a process of `service` reads: its settings class (aliases or
    prefix + field name, as pydantic-settings resolves them), the auth settings and logging."""
    from authclient import AuthSettings

    cls = settings_class(service)
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    names: set[str] = set()
    for field_name, field in cls.model_fields.items():
        aliases = _alias_names(field.validation_alias) | _alias_names(field.alias)
        names |= aliases or {prefix + field_name.upper()}
    names |= {name.upper() for name in AuthSettings.model_fields}
    names |= {"LOG_FORMAT", "LOG_LEVEL"}  # servicekit.logging
    return frozenset(names)


@functools.cache
def secret_env_names(service: str) -> frozenset[str]:
    """Names whose value is a credential: SecretStr fields, database URLs (they carry the
    password) and previous keys."""
    from pydantic import SecretStr

    from authclient import AuthSettings

    cls = settings_class(service)
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    names: set[str] = set()
    for model, pfx in ((cls, prefix), (AuthSettings, "")):
        for field_name, field in model.model_fields.items():
            if SecretStr in _types(field.annotation):
                aliases = _alias_names(field.validation_alias)
                names |= aliases or {pfx + field_name.upper()}
    names |= {n for n in env_names(service) if n.endswith("DATABASE_URL")}
    names |= {n for n in env_names(service) if "SECRET_KEY" in n}
    return frozenset(names)


def _types(annotation: object) -> set[object]:
    args = getattr(annotation, "__args__", None)
    return {annotation} if not args else {a for arg in args for a in _types(arg)}


def service_of(container: Doc) -> str:
    """Which service a container runs: its command is the console script."""
    command = container["command"][0]
    assert command in ("scheduler", "notification"), command
    return str(command)


# --- Dockerfile ------------------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    value: str


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[str]:
        return [i.value for i in self.instructions if i.keyword == keyword]


def dockerfile_stages(text: str) -> list[Stage]:
    """Parse a Dockerfile: comments dropped, `\\` continuations joined, instructions grouped by
    FROM. Enough of the syntax for the file we write (no heredocs, default escape)."""
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, value = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", value.strip(), re.I)
            assert m, f"unreadable FROM: {value}"
            stages.append(Stage(m.group(1), m.group(2), []))
        elif stages:
            stages[-1].instructions.append(Instruction(keyword, value.strip()))
    return stages


def exec_form(value: str) -> list[str]:
    parsed = json.loads(value)
    assert isinstance(parsed, list), value
    assert all(isinstance(p, str) for p in parsed), value
    return parsed


# --- runbook ---------------------------------------------------------------------------------


def runbook_code() -> str:
    """The text of every fenced code block of docs/operations.md, continuations joined."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", RUNBOOK.read_text(), re.S)
    return "\n".join(blocks).replace("\\\n", " ")
