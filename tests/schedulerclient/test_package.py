"""schedulerclient stands alone: its own distribution needing only httpx and pydantic, no import
of anything else, and no secret in a repr."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import schedulerclient
from schedulerclient import Client
from schedulerclient.models import ScheduleCreate, ScheduleWithSecret, SubscriptionWithSecretOut

PACKAGE = Path(schedulerclient.__file__).resolve().parent
ALLOWED = {"httpx", "pydantic", "pydantic_core", "schedulerclient"}


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_package_imports_only_httpx_pydantic_and_the_standard_library() -> None:
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) >= 10
    for path in files:
        foreign = _imported(path) - ALLOWED - set(sys.stdlib_module_names)
        assert foreign == set(), f"{path.name} imports {foreign}"


def test_its_distribution_depends_on_httpx_and_pydantic_only() -> None:
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    assert project["name"] == "schedulerclient"
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in project["dependencies"]}
    assert names == {"httpx", "pydantic"}


def test_the_platform_wheel_ships_it() -> None:
    root = tomllib.loads((PACKAGE.parents[1] / "pyproject.toml").read_text())
    assert "pkg/schedulerclient" in root["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert any(d.startswith("httpx") for d in root["project"]["dependencies"])


def test_no_token_or_secret_in_a_repr() -> None:
    client = Client("http://api.test", token="tok-very-secret")
    assert "tok-very-secret" not in repr(client)
    client.close()
    with_secret = SubscriptionWithSecretOut.model_validate(
        {
            "id": "sub_1",
            "url": "https://example.com",
            "event_types": ["schedule.*"],
            "description": None,
            "enabled": True,
            "disabled_reason": None,
            "previous_secret_expires_at": None,
            "created_at": "2026-03-01T00:00:00Z",
            "updated_at": "2026-03-01T00:00:00Z",
            "secret": "whsec_hidden",
        }
    )
    assert "whsec_hidden" not in repr(with_secret)
    assert with_secret.secret == "whsec_hidden"
    body = ScheduleCreate(name="n", timezone="UTC", secret="whsec_supplied")
    assert "whsec_supplied" not in repr(body)
    assert "secret" in ScheduleWithSecret.model_fields
