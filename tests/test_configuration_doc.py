"""docs/configuration.md is what scripts/configuration_doc.py writes from the settings classes;
every variable it lists really sets its field; every SCHEDULER_/NOTIFICATION_ variable the
README, docs and manifests name is one of them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import SecretStr

from notification.config import NotificationSettings
from scheduler.config import SchedulerSettings
from servicekit.settings import ConfigError, ServiceSettings

ROOT = Path(__file__).resolve().parent.parent
SERVICES: tuple[type[ServiceSettings], ...] = (SchedulerSettings, NotificationSettings)
# A whole name: not the tail of EMBEDDED_SCHEDULER_PORT, not a fragment such as SCHEDULER_DB_….
SERVICE_VARIABLE = re.compile(
    r"(?<![A-Z0-9_])(?:SCHEDULER|NOTIFICATION)_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_])"
)
# Read by the client side (schedulerclient's `from_env`, the `scheduler` CLI), not by a service.
CLIENT_VARIABLES = {"SCHEDULER_URL", "SCHEDULER_TOKEN", "NOTIFICATION_URL"}


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "configuration_doc", ROOT / "scripts" / "configuration_doc.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_doc_is_current() -> None:
    generator = _generator()
    committed = (ROOT / "docs" / "configuration.md").read_text()
    if committed != generator.render():
        pytest.fail(
            "docs/configuration.md is out of date with the settings classes: "
            f"run `{generator.COMMAND}` and commit the result"
        )


@pytest.mark.parametrize("cls", SERVICES, ids=lambda c: c.__name__)
def test_every_listed_variable_sets_its_field(
    cls: type[ServiceSettings], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in cls.model_fields:
        env = cls.env_name(name)
        with monkeypatch.context() as m:
            m.setenv(env, "§not-a-value§")
            # Text is taken as it is; numbers, flags and port lists are refused, by this name.
            assert _read(cls, name) in ("§not-a-value§", f"refused: {env} ({name})"), env


def _read(cls: type[ServiceSettings], name: str) -> str:
    try:
        value = getattr(cls(), name)
    except ConfigError as exc:
        found = re.search(rf"\b{cls.env_name(name)} \({name}\)", str(exc))
        return f"refused: {found.group(0)}" if found else str(exc)
    return str(value.get_secret_value() if isinstance(value, SecretStr) else value)


def test_every_service_variable_the_docs_name_is_read() -> None:
    read = {cls.env_name(name) for cls in SERVICES for name in cls.model_fields} | CLIENT_VARIABLES
    sources = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "deploy").rglob("*")]
    named = {
        (match, path.relative_to(ROOT).as_posix())
        for path in sources
        if path.is_file() and path.suffix in {".md", ".yaml", ".yml", ".env", ""}
        for match in SERVICE_VARIABLE.findall(path.read_text(errors="replace"))
    }
    unknown = sorted((name, where) for name, where in named if name not in read)
    assert unknown == []


def test_design_names_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """DESIGN §3's names, which users rely on."""
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", "postgresql+asyncpg://s/db")
    monkeypatch.setenv("NOTIFICATION_DATABASE_URL", "postgresql+asyncpg://n/db")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k:9092")
    monkeypatch.setenv("KAFKA_IDEMPOTENT", "false")
    monkeypatch.setenv("SCHEDULER_SECRET_KEY", "s" * 43)
    monkeypatch.setenv("NOTIFICATION_SECRET_KEY", "n" * 43)
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true")
    monkeypatch.setenv("NOTIFICATION_SMTP_URL", "smtps://mail.example.com")
    monkeypatch.setenv("NOTIFICATION_MAIL_FROM", "ops@example.com")
    monkeypatch.setenv("AUTH_HS256_KEY", "h" * 32)
    s, n = SchedulerSettings(), NotificationSettings()
    assert s.database_url == "postgresql+asyncpg://s/db"
    assert n.database_url == "postgresql+asyncpg://n/db"
    for settings in (s, n):
        assert settings.kafka_bootstrap_servers == "k:9092"
        assert settings.kafka_idempotent is False
        assert settings.webhook_allow_private_networks is True
    assert s.secret_key is not None
    assert s.secret_key.get_secret_value() == "s" * 43
    assert n.secret_key is not None
    assert n.secret_key.get_secret_value() == "n" * 43
    assert n.smtp_url is not None
    assert n.mail_from == "ops@example.com"
    assert s.auth_hs256_key is not None
    assert s.auth_hs256_key.get_secret_value() == "h" * 32


def test_a_prefixed_spelling_of_a_shared_name_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # One name per setting: the shared ones are read unprefixed only.
    monkeypatch.setenv("SCHEDULER_KAFKA_BOOTSTRAP_SERVERS", "k:9092")
    monkeypatch.setenv("NOTIFICATION_WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true")
    monkeypatch.setenv("DATABASE_URL", "postgresql+asyncpg://someone-else/db")
    assert SchedulerSettings().kafka_bootstrap_servers is None
    assert NotificationSettings().webhook_allow_private_networks is False
    assert SchedulerSettings().database_url.startswith("sqlite")


def test_a_bad_value_is_one_line_naming_the_variable_not_the_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCHEDULER_MAX_LEASE_EXPIRIES", "0")
    monkeypatch.setenv("KAFKA_IDEMPOTENT", "secret-ish")
    with pytest.raises(ConfigError) as err:
        SchedulerSettings()
    message = str(err.value)
    assert "\n" not in message
    assert "SCHEDULER_MAX_LEASE_EXPIRIES (max_lease_expiries)" in message
    assert "KAFKA_IDEMPOTENT (kafka_idempotent)" in message
    assert "secret-ish" not in message


def test_relay_settings_default_to_the_relay_config() -> None:
    from scheduler.adapters.events import RelayConfig
    from scheduler.bootstrap import relay_config

    assert relay_config(SchedulerSettings()) == RelayConfig()


@pytest.mark.parametrize(
    "variable", ["SCHEDULER_MAX_LEASE_EXPIRIES", "NOTIFICATION_MAX_REQUEST_BYTES"]
)
def test_one_config_error_for_both_services(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    from notification.config import NotificationSettings
    from scheduler.config import SchedulerSettings

    monkeypatch.setenv(variable, "-1")
    settings = SchedulerSettings if variable.startswith("SCHEDULER_") else NotificationSettings
    with pytest.raises(ConfigError, match=variable):
        settings()
