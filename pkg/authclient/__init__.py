"""Shared bearer-token verification for both services.

    settings = AuthSettings()                      # AUTH_* from the environment
    verifier = TokenVerifier(settings)
    principal = await verifier.verify(token)       # Principal, or raises AuthError

FastAPI glue lives in `authclient.fastapi` (`install`, `require`); it is not imported here so
that non-HTTP users (CLI, workers) do not pull in FastAPI.
"""

from authclient.errors import AuthError, JwksUnavailableError
from authclient.minting import mint_token
from authclient.principal import Principal
from authclient.settings import DEFAULT_AUDIENCE, DEFAULT_ISSUER, AuthSettings
from authclient.verifier import MAX_TOKEN_CHARS, TokenVerifier

__all__ = [
    "DEFAULT_AUDIENCE",
    "DEFAULT_ISSUER",
    "MAX_TOKEN_CHARS",
    "AuthError",
    "AuthSettings",
    "JwksUnavailableError",
    "Principal",
    "TokenVerifier",
    "mint_token",
]
