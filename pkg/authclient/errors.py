"""Errors raised by token verification.

AuthError carries the RFC 6750 error code (always "invalid_token" for a token that was presented
and refused) and a description that is safe to put in a `WWW-Authenticate` header: ASCII, no
quotes or backslashes, and never a fragment of the token itself.
"""

from __future__ import annotations

import re

# RFC 6750 §3: error_description is restricted to %x20-21 / %x23-5B / %x5D-7E (no `"` or `\`).
_UNSAFE = re.compile(r'[^\x20-\x7e]|["\\]')
_MAX_DESCRIPTION = 200


class AuthError(Exception):
    """A presented bearer token was refused."""

    def __init__(self, description: str, *, error: str = "invalid_token") -> None:
        self.error = error
        self.description = _UNSAFE.sub("?", description)[:_MAX_DESCRIPTION]
        super().__init__(f"{self.error}: {self.description}")


class JwksUnavailableError(AuthError):
    """The JWKS document could not be fetched or parsed, and no cached keys could serve."""
