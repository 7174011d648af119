"""deploy/Dockerfile: always checked statically (stages, user, no build tools in the final stage,
what is copied, entrypoint); built and run when a container daemon answers (`docker info`),
otherwise that test is skipped and the skip reason says so (`pytest -rs`)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.rendered import (
    DOCKERFILE,
    ROOT,
    Stage,
    dockerfile_stages,
    exec_form,
    of_kind,
    pod_specs,
    render,
)

BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|cc|clang|make|build-essential|[a-z0-9.+-]+-dev|pip\s+install|apt-get\s+install)\b"
)


def _stages() -> list[Stage]:
    return dockerfile_stages(DOCKERFILE.read_text())


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_multi_stage_with_a_separate_final_stage() -> None:
    stages = _stages()
    assert len(stages) >= 2
    build, final = stages[0], stages[-1]
    assert build.name, "the build stage is named, so the final stage copies from it by name"
    # The final stage starts from the base image, not from the build stage (no compilers in it).
    assert final.base != build.name
    assert final.base == build.base


def test_final_stage_runs_as_a_fixed_non_root_user_that_the_pods_name() -> None:
    final = _stages()[-1]
    users = final.all("USER")
    assert users, "the final stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), "numeric uid, so runAsNonRoot can verify it"
    assert int(uid) != 0
    for docs in (render("overlays/production"), render("overlays/production/migrate")):
        for _, spec in pod_specs(docs):
            assert spec["securityContext"]["runAsUser"] == int(uid)


def test_no_build_tools_in_the_final_stage() -> None:
    final = _stages()[-1]
    for run in final.all("RUN"):
        assert not BUILD_TOOLS.search(run), run
    for copy in final.all("COPY"):
        assert "--from=" in copy, f"the final stage copies only build results: {copy}"


def test_final_stage_copies_the_built_environment_from_the_build_stage() -> None:
    build, final = _stages()[0], _stages()[-1]
    copies = final.all("COPY")
    assert any(c.startswith(f"--from={build.name} /opt/venv") for c in copies), copies
    # The build stage installs the wheel it built from this repository into that venv.
    assert any("pip wheel" in r and "pip install /wheels/" in r for r in build.all("RUN"))
    assert any(e.startswith("PATH=/opt/venv/bin") for env in final.all("ENV") for e in env.split())


def test_build_stage_copies_every_packaged_source_and_dockerignore_keeps_them() -> None:
    packages = _pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    roots = {p.split("/")[0] for p in packages}
    copied = {c.split()[0].rstrip("/") for c in _stages()[0].all("COPY") if "--from" not in c}
    assert roots | {"pyproject.toml"} <= copied, f"{roots} must all be copied, got {copied}"
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert "*" in ignore  # everything else (.venv, var, .git, tests) stays out of the context
    for source in roots | {"pyproject.toml"}:
        assert f"!{source}" in ignore or f"!{source}/" in ignore, source


def test_entrypoint_is_a_console_script_and_cmd_a_serve_of_it() -> None:
    final = _stages()[-1]
    scripts = _pyproject()["project"]["scripts"]
    (entrypoint,) = final.all("ENTRYPOINT")
    argv = exec_form(entrypoint)
    assert argv[0] in scripts, f"{argv} is not one of {sorted(scripts)}"
    (cmd,) = final.all("CMD")
    assert exec_form(cmd)[0] in ("serve", "migrate")
    # Every pod names one of the console scripts as its command (the image has both on PATH).
    for docs in (render("overlays/production"), render("overlays/production/migrate")):
        for _, spec in pod_specs(docs):
            for c in spec["containers"]:
                assert c["command"][0] in scripts


def test_read_only_root_filesystem_friendly() -> None:
    final = _stages()[-1]
    env = " ".join(final.all("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "HOME=/tmp" in env
    (workdir,) = final.all("WORKDIR")
    # The one place a process writes besides /tmp is ./var (notification's .eml fallback),
    # which the notification pod mounts as a volume.
    (notification,) = [
        d
        for d in of_kind(render("overlays/production"), "Deployment")
        if d["metadata"]["name"] == "notification"
    ]
    mounts = {
        m["mountPath"]
        for m in notification["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    }
    assert {"/tmp", f"{workdir}/var"} <= mounts


def _docker_daemon() -> str | None:
    """Why the image cannot be built here, or None when a daemon answers."""
    docker = shutil.which("docker")
    if docker is None:
        return "no docker client"
    try:
        info = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "docker info timed out"
    if info.returncode != 0:
        return "docker info failed: no container daemon"
    return None


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_image_builds_and_runs_read_only_as_non_root(tmp_path: Path) -> None:
    reason = _docker_daemon()
    if reason is not None:
        pytest.skip(f"image not built ({reason}); Dockerfile checked statically only")
    tag = f"scheduler-platform:test-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["docker", "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)], check=True, timeout=1100
    )
    try:
        run = ["docker", "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL"]
        uid = subprocess.run(
            [*run, "--entrypoint", "id", tag, "-u"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert uid.stdout.strip() == "10001"
        preview = subprocess.run(
            [
                *run,
                tag,
                "preview",
                "--cron",
                "30 2 * * *",
                "--tz",
                "America/New_York",
                "--after",
                "2026-03-07T00:00:00Z",
                "--count",
                "2",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert preview.stdout.splitlines()[1] == "2026-03-08T03:00:00-04:00"
        for script in ("scheduler", "notification"):
            subprocess.run(
                [*run, "--entrypoint", script, tag, "--help"],
                check=True,
                timeout=60,
                capture_output=True,
            )
        for tool in ("gcc", "pip"):
            which = subprocess.run(
                [*run, "--entrypoint", "sh", tag, "-c", f"command -v {tool}"],
                capture_output=True,
                timeout=60,
            )
            assert which.returncode != 0, f"{tool} is in the final image"
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=60)
