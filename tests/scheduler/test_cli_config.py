"""SchedulerSettings: dev keys generated once with mode 0600 and reused; production refuses with
one line naming the missing variable; malformed keys are named too."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from scheduler.config import SchedulerSettings
from servicekit.settings import ConfigError


def _settings(**kw: object) -> SchedulerSettings:
    base: dict[str, object] = {"secret_key": None, "auth_hs256_key": None}
    base.update(kw)
    return SchedulerSettings(**base)  # type: ignore[arg-type]


def test_dev_generates_keys_once_0600(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTH_JWKS_URL", raising=False)
    monkeypatch.delenv("AUTH_JWKS_FILE", raising=False)
    first = _settings().ensure_keys(dev=True, var_dir=tmp_path)
    second = _settings().ensure_keys(dev=True, var_dir=tmp_path)
    assert first.secret_key is not None
    assert second.secret_key is not None
    assert first.secret_key.get_secret_value() == second.secret_key.get_secret_value()
    assert len(first.encryption_keys()[0]) == 32
    for f in tmp_path.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600


def test_production_refuses_missing_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _settings().ensure_keys(dev=False, var_dir=tmp_path)
    assert "SCHEDULER_SECRET_KEY" in str(err.value)
    assert "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_malformed_key_is_named() -> None:
    with pytest.raises(ConfigError, match="SCHEDULER_SECRET_KEY must decode to 32 bytes"):
        _settings(secret_key=SecretStr("c2hvcnQ=")).encryption_keys()


def test_env_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", "postgresql+asyncpg://x/y")
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true")
    monkeypatch.setenv("KAFKA_IDEMPOTENT", "false")
    s = SchedulerSettings()
    assert s.database_url == "postgresql+asyncpg://x/y"
    assert s.webhook_allow_private_networks is True
    assert s.kafka_idempotent is False
