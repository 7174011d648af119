"""AuthSettings reads the exact AUTH_* names; TokenVerifier refuses unusable settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from authclient import AuthSettings, TokenVerifier

from .conftest import HS_KEY

AUTH_VARIABLES = [
    "AUTH_HS256_KEY",
    "AUTH_JWKS_URL",
    "AUTH_JWKS_FILE",
    "AUTH_AUDIENCE",
    "AUTH_ISSUER",
    "AUTH_LEEWAY_SECONDS",
]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AUTH_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_defaults() -> None:
    settings = AuthSettings()
    assert settings.AUTH_AUDIENCE == "scheduler-platform"
    assert settings.AUTH_ISSUER == "scheduler-platform-dev"
    assert settings.AUTH_LEEWAY_SECONDS == 30
    assert not settings.configured()


def test_reads_unprefixed_environment_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AUTH_HS256_KEY", HS_KEY)
    monkeypatch.setenv("AUTH_JWKS_FILE", str(tmp_path / "jwks.json"))
    monkeypatch.setenv("AUTH_AUDIENCE", "aud-x")
    monkeypatch.setenv("AUTH_ISSUER", "iss-x")
    monkeypatch.setenv("AUTH_LEEWAY_SECONDS", "5")
    settings = AuthSettings()
    assert settings.AUTH_HS256_KEY is not None
    assert settings.AUTH_HS256_KEY.get_secret_value() == HS_KEY
    assert tmp_path / "jwks.json" == settings.AUTH_JWKS_FILE
    assert (settings.AUTH_AUDIENCE, settings.AUTH_ISSUER) == ("aud-x", "iss-x")
    assert settings.AUTH_LEEWAY_SECONDS == 5
    assert settings.configured()


def test_key_is_never_printed() -> None:
    settings = AuthSettings(AUTH_HS256_KEY=HS_KEY)
    assert HS_KEY not in repr(settings)
    assert HS_KEY not in str(settings.model_dump())


def test_short_key_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least 32 characters"):
        AuthSettings(AUTH_HS256_KEY="x" * 31)


def test_empty_variable_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTH_JWKS_URL", "")
    assert AuthSettings().AUTH_JWKS_URL is None


@pytest.mark.parametrize("url", ["ftp://idp/jwks", "file:///etc/passwd", "idp/jwks"])
def test_jwks_url_must_be_http(url: str) -> None:
    with pytest.raises(ValidationError, match="http"):
        AuthSettings(AUTH_JWKS_URL=url)


@pytest.mark.parametrize("leeway", [-1, 301])
def test_leeway_is_bounded(leeway: int) -> None:
    with pytest.raises(ValidationError):
        AuthSettings(AUTH_LEEWAY_SECONDS=leeway)


def test_verifier_refuses_no_key_source() -> None:
    with pytest.raises(ValueError, match="no token key configured"):
        TokenVerifier(AuthSettings())


def test_verifier_refuses_two_jwks_sources(tmp_path: Path) -> None:
    settings = AuthSettings(AUTH_JWKS_URL="https://idp.invalid/jwks", AUTH_JWKS_FILE=tmp_path)
    with pytest.raises(ValueError, match="not both"):
        TokenVerifier(settings)
