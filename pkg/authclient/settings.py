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

    AUTH_HS256_KEY: SecretStr | None = Field(
        default=None,
        description="Shared HS256 key (at least 32 characters); `serve --dev` generates one "
        "under `var/`. One of this, `AUTH_JWKS_URL` or `AUTH_JWKS_FILE` is required.",
    )
    AUTH_JWKS_URL: str | None = Field(
        default=None, description="JWKS of the identity provider (RS256/ES256/EdDSA tokens)."
    )
    AUTH_JWKS_FILE: Path | None = Field(
        default=None, description="A JWKS read from a file instead of a URL."
    )
    AUTH_AUDIENCE: str = Field(
        default=DEFAULT_AUDIENCE,
        min_length=1,
        max_length=200,
        description="Required `aud` (`scheduler token` mints with it too).",
    )
    AUTH_ISSUER: str = Field(
        default=DEFAULT_ISSUER,
        min_length=1,
        max_length=200,
        description="Required `iss` (`scheduler token` mints with it too).",
    )
    # More than 5 minutes would hide a broken clock.
    AUTH_LEEWAY_SECONDS: int = Field(
        default=30, ge=0, le=300, description="Clock skew tolerated on `exp`/`nbf`/`iat`."
    )
    AUTH_JWKS_CACHE_SECONDS: float = Field(
        default=300.0,
        gt=0,
        le=86_400,
        description="JWKS keys are reused this long, then refetched.",
    )
    # So a flood of tokens with random kids (kid-spam) cannot turn into a flood of requests to
    # the identity provider.
    AUTH_JWKS_MIN_REFETCH_SECONDS: float = Field(
        default=30.0,
        ge=0,
        le=3_600,
        description="An unknown `kid` triggers a JWKS refetch at most this often.",
    )
    AUTH_JWKS_TIMEOUT_SECONDS: float = Field(
        default=5.0, gt=0, le=60, description="Bound of one JWKS fetch."
    )
    # A real JWKS holds a handful of keys (a few KiB); 64 KiB bounds memory and parse time.
    AUTH_JWKS_MAX_BYTES: int = Field(
        default=65_536, ge=1_024, le=1_048_576, description="Largest JWKS accepted."
    )

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
