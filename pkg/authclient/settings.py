"""Token-verification settings, read from the environment (no prefix; both services share them)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_AUDIENCE = "scheduler-platform"
DEFAULT_ISSUER = "scheduler-platform-dev"
MIN_HS256_KEY_CHARS = 32


class AuthSettings(BaseSettings):
    """`AUTH_*` variables. Field names are the environment names, exactly."""

    # An empty variable (`AUTH_JWKS_URL=`) means unset, as in most shells and compose files.
    model_config = SettingsConfigDict(extra="ignore", frozen=True, env_ignore_empty=True)

    AUTH_HS256_KEY: SecretStr | None = None
    AUTH_JWKS_URL: str | None = None
    AUTH_JWKS_FILE: Path | None = None
    AUTH_AUDIENCE: str = Field(default=DEFAULT_AUDIENCE, min_length=1, max_length=200)
    AUTH_ISSUER: str = Field(default=DEFAULT_ISSUER, min_length=1, max_length=200)
    # Clock skew tolerated on exp/nbf/iat; more than 5 minutes would hide a broken clock.
    AUTH_LEEWAY_SECONDS: int = Field(default=30, ge=0, le=300)
    # JWKS caching: keys are reused for this long, then refetched.
    AUTH_JWKS_CACHE_SECONDS: float = Field(default=300.0, gt=0, le=86_400)
    # An unknown kid triggers a refetch at most this often, so a flood of tokens with random
    # kids (kid-spam) cannot turn into a flood of requests to the identity provider.
    AUTH_JWKS_MIN_REFETCH_SECONDS: float = Field(default=30.0, ge=0, le=3_600)
    AUTH_JWKS_TIMEOUT_SECONDS: float = Field(default=5.0, gt=0, le=60)
    # A real JWKS holds a handful of keys (a few KiB); 64 KiB bounds memory and parse time.
    AUTH_JWKS_MAX_BYTES: int = Field(default=65_536, ge=1_024, le=1_048_576)

    @field_validator("AUTH_HS256_KEY")
    @classmethod
    def _key_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_HS256_KEY_CHARS:
            raise ValueError(f"AUTH_HS256_KEY must be at least {MIN_HS256_KEY_CHARS} characters")
        return value

    @field_validator("AUTH_JWKS_URL")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError("AUTH_JWKS_URL must be an http(s) URL")
        return value

    def configured(self) -> bool:
        """True when at least one key source (shared key, JWKS URL or JWKS file) is set."""
        return any(
            source is not None
            for source in (self.AUTH_HS256_KEY, self.AUTH_JWKS_URL, self.AUTH_JWKS_FILE)
        )
