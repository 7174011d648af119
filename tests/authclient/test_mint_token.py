"""mint_token makes tokens the verifier accepts, with the same defaults, and nothing looser."""

from __future__ import annotations

from typing import Any

import jwt
import pytest

from authclient import AuthError, TokenVerifier, mint_token

from .conftest import HS_KEY, NOW, Clock, hs_settings


async def test_minted_token_round_trips(clock: Clock) -> None:
    token = mint_token(
        HS_KEY, tenant_id="t-1", scopes=["schedules:read", "schedules:read", "x:y"], now=NOW
    )
    principal = await TokenVerifier(hs_settings(), clock=clock).verify(token)
    assert principal.tenant_id == "t-1"
    assert principal.subject == "dev"
    assert principal.scopes == frozenset({"schedules:read", "x:y"})
    payload = jwt.decode(token, options={"verify_signature": False})
    assert payload["scope"] == "schedules:read x:y"  # deduplicated, order kept
    assert payload["exp"] - payload["iat"] == 3600


async def test_minted_token_expires_after_ttl(clock: Clock) -> None:
    token = mint_token(HS_KEY, tenant_id="t-1", scopes=[], ttl_seconds=60, now=NOW)
    verifier = TokenVerifier(hs_settings(), clock=clock)
    await verifier.verify(token)
    clock.advance(60 + 30)  # ttl plus the leeway
    with pytest.raises(AuthError, match="expired"):
        await verifier.verify(token)


async def test_other_audience_is_refused_by_default_verifier(clock: Clock) -> None:
    token = mint_token(HS_KEY, tenant_id="t-1", scopes=[], audience="elsewhere", now=NOW)
    with pytest.raises(AuthError, match="audience"):
        await TokenVerifier(hs_settings(), clock=clock).verify(token)


async def test_custom_audience_and_issuer_match_custom_settings(clock: Clock) -> None:
    token = mint_token(HS_KEY, tenant_id="t", scopes=[], audience="a", issuer="i", now=NOW)
    verifier = TokenVerifier(hs_settings(AUTH_AUDIENCE="a", AUTH_ISSUER="i"), clock=clock)
    assert (await verifier.verify(token)).tenant_id == "t"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"key": "short"}, "at least 32"),
        ({"tenant_id": ""}, "non-empty"),
        ({"subject": " "}, "non-empty"),
        ({"ttl_seconds": 0}, "ttl_seconds"),
        ({"ttl_seconds": 367 * 86400}, "ttl_seconds"),
        ({"scopes": ["a b"]}, "whitespace"),
        ({"scopes": [""]}, "non-empty"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], expected: str) -> None:
    arguments: dict[str, Any] = {"key": HS_KEY, "tenant_id": "t", "scopes": ["s"], **kwargs}
    key = arguments.pop("key")
    with pytest.raises(ValueError, match=expected):
        mint_token(key, **arguments)
