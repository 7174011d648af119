"""The client agrees with the OpenAPI documents: the committed models and methods are what
scripts/generate_client.py writes from both apps now, every operation has its method, and the
models read what the documents describe."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from schedulerclient import AsyncClient, Client, models

ROOT = Path(__file__).resolve().parents[2]
METHODS = {"get", "put", "post", "patch", "delete", "head", "options"}


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_client", ROOT / "scripts" / "generate_client.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return _generator()


@pytest.fixture(scope="module")
def documents(generator: ModuleType) -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = generator.openapi_documents()
    return docs


def test_the_committed_modules_are_what_the_generator_writes(
    generator: ModuleType, documents: dict[str, dict[str, Any]]
) -> None:
    for path, text in generator.render(documents).items():
        if path.read_text() != text:
            pytest.fail(
                f"{path.relative_to(ROOT)} is out of date with the OpenAPI documents: "
                f"run `{generator.COMMAND}` and commit the result"
            )


def test_the_generator_is_deterministic(
    generator: ModuleType, documents: dict[str, dict[str, Any]]
) -> None:
    assert generator.render(documents) == generator.render(documents)


def _snake(op_id: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op_id).lower()


def test_every_operation_of_both_services_is_a_method_of_both_clients(
    documents: dict[str, dict[str, Any]],
) -> None:
    ids = [
        op["operationId"]
        for doc in documents.values()
        for item in doc["paths"].values()
        for method, op in item.items()
        if method in METHODS
    ]
    assert {"listSchedules", "createSchedule", "getRun", "listSubscriptions"} <= set(ids)
    for op_id in ids:
        assert callable(getattr(Client, _snake(op_id), None)), op_id
        assert callable(getattr(AsyncClient, _snake(op_id), None)), op_id


def test_every_component_schema_is_a_model_with_its_fields(
    documents: dict[str, dict[str, Any]],
) -> None:
    for service, doc in documents.items():
        for name, schema in doc["components"]["schemas"].items():
            python = name.replace("_", "")
            # A name both services use: the second service's model carries its prefix.
            prefixed = getattr(models, service.capitalize() + python, None)
            model = prefixed or getattr(models, python)
            properties = schema.get("properties")
            if properties is None:
                continue  # an enum or a free-form value: a type alias
            aliases = {f.alias or n for n, f in model.model_fields.items()}
            assert aliases == set(properties), f"{service} {name}"
            required = {f.alias or n for n, f in model.model_fields.items() if f.is_required()}
            assert required == set(schema.get("required", [])), f"{service} {name}"


def test_a_field_named_like_a_keyword_keeps_its_json_name() -> None:
    body = models.BackfillIn(from_="2026-03-01T00:00:00Z", to="2026-03-02T00:00:00Z")
    assert set(body.model_dump(by_alias=True, exclude_unset=True)) == {"from", "to"}
    assert (
        models.BackfillIn.model_validate(
            {"from": "2026-03-01T00:00:00Z", "to": "2026-03-02T00:00:00Z"}
        ).from_
        == body.from_
    )
