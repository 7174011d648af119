"""HS256 verification with a shared key: the accepted token and every refusal."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from authclient import AuthError, Principal, TokenVerifier

from .conftest import HS_KEY, NOW, Clock, claims, forge, hs_settings, sign


@pytest.fixture
def verifier(clock: Clock) -> TokenVerifier:
    return TokenVerifier(hs_settings(), clock=clock)


async def test_valid_token_yields_principal(verifier: TokenVerifier) -> None:
    principal = await verifier.verify(sign(claims(), HS_KEY, "HS256"))
    assert principal == Principal(
        subject="user-1",
        tenant_id="tenant-a",
        scopes=frozenset({"schedules:read", "schedules:write"}),
    )
    assert principal.has("schedules:read")
    assert not principal.has("notifications:read")


async def test_missing_scope_claim_means_no_scopes(verifier: TokenVerifier) -> None:
    principal = await verifier.verify(sign(claims(scope=None), HS_KEY, "HS256"))
    assert principal.scopes == frozenset()


async def test_audience_list_containing_ours_is_accepted(verifier: TokenVerifier) -> None:
    token = sign(claims(aud=["other", "scheduler-platform"]), HS_KEY, "HS256")
    assert (await verifier.verify(token)).tenant_id == "tenant-a"


async def refusal(verifier: TokenVerifier, token: str) -> AuthError:
    with pytest.raises(AuthError) as caught:
        await verifier.verify(token)
    assert caught.value.error == "invalid_token"
    return caught.value


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"tenant_id": None}, "no tenant_id"),
        ({"tenant_id": ""}, "no tenant_id"),
        ({"tenant_id": "   "}, "no tenant_id"),
        ({"tenant_id": 42}, "no tenant_id"),
        ({"tenant_id": "t" * 201}, "tenant_id claim exceeds"),
        ({"sub": None}, "no sub"),
        ({"sub": ""}, "no sub"),
        ({"aud": "someone-else"}, "audience"),
        ({"aud": None}, "no aud"),
        ({"iss": "evil-issuer"}, "issuer"),
        ({"iss": None}, "no iss"),
        ({"exp": None}, "no exp"),
        ({"exp": "tomorrow"}, "exp claim is not a number"),
        ({"scope": ["schedules:read"]}, "scope claim is not a string"),
        ({"scope": " ".join(f"s{i}" for i in range(101))}, "scope claim is too large"),
        # Every query is keyed by the tenant id; PostgreSQL cannot store NUL (was a 500).
        ({"tenant_id": "acme\x00"}, "tenant_id claim contains a control character"),
        ({"tenant_id": "ac\x1bme"}, "tenant_id claim contains a control character"),
        ({"sub": "dev\n"}, "sub claim contains a control character"),
        ({"scope": "schedules:read\x00"}, "scope claim contains a control character"),
    ],
)
async def test_bad_claims_are_refused(
    verifier: TokenVerifier, overrides: dict[str, Any], expected: str
) -> None:
    error = await refusal(verifier, sign(claims(**overrides), HS_KEY, "HS256"))
    assert expected in error.description


@pytest.mark.parametrize(("name", "raw"), [("exp", "NaN"), ("exp", "Infinity"), ("nbf", "1e400")])
async def test_non_finite_numeric_dates_are_refused(
    verifier: TokenVerifier, name: str, raw: str
) -> None:
    # NaN compares false both ways, so `exp <= now` would never say expired.
    payload = json.dumps(claims(**{name: "__RAW__"})).replace('"__RAW__"', raw)
    header = base64.urlsafe_b64encode(b'{"alg":"HS256"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode()
    signature = hmac.new(HS_KEY.encode(), f"{header}.{body}".encode(), hashlib.sha256).digest()
    token = f"{header}.{body}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"
    assert (await refusal(verifier, token)).description == f"token {name} claim is out of range"


async def test_bool_is_not_a_numeric_date(verifier: TokenVerifier) -> None:
    # Python's bool is an int, so a naive isinstance check would read `true` as 1 (1970).
    error = await refusal(verifier, sign(claims(iat=True), HS_KEY, "HS256"))
    assert error.description == "token iat claim is not a number"


@pytest.mark.parametrize(
    ("overrides", "accepted", "expected"),
    [
        # A token is dead once now >= exp + leeway; nbf/iat may be up to leeway ahead.
        ({"exp": int(NOW) - 29}, True, ""),
        ({"exp": int(NOW) - 30}, False, "expired"),
        ({"exp": int(NOW) - 3600}, False, "expired"),
        ({"nbf": int(NOW) + 30}, True, ""),
        ({"nbf": int(NOW) + 31}, False, "not yet valid"),
        ({"iat": int(NOW) + 30}, True, ""),
        ({"iat": int(NOW) + 31}, False, "issued in the future"),
    ],
)
async def test_time_claims_respect_the_30s_leeway(
    verifier: TokenVerifier, overrides: dict[str, Any], accepted: bool, expected: str
) -> None:
    token = sign(claims(**overrides), HS_KEY, "HS256")
    if accepted:
        assert (await verifier.verify(token)).subject == "user-1"
    else:
        assert expected in (await refusal(verifier, token)).description


async def test_expiry_follows_the_injected_clock(verifier: TokenVerifier, clock: Clock) -> None:
    token = sign(claims(), HS_KEY, "HS256")  # exp = NOW + 600
    await verifier.verify(token)
    clock.advance(600 + 30)
    assert "expired" in (await refusal(verifier, token)).description


async def test_wrong_key_is_refused(verifier: TokenVerifier) -> None:
    token = sign(claims(), "another-key-that-is-long-enough-0123456789", "HS256")
    assert "signature" in (await refusal(verifier, token)).description


async def test_tampered_payload_is_refused(verifier: TokenVerifier) -> None:
    header, _payload, signature = sign(claims(), HS_KEY, "HS256").split(".")
    evil = forge({"alg": "HS256"}, claims(tenant_id="tenant-b"), None).split(".")[1]
    assert "signature" in (await refusal(verifier, f"{header}.{evil}.{signature}")).description


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
async def test_alg_none_is_refused(verifier: TokenVerifier, alg: str) -> None:
    token = forge({"alg": alg, "typ": "JWT"}, claims(), None)
    assert "not accepted" in (await refusal(verifier, token)).description


@pytest.mark.parametrize("alg", ["HS384", "HS512", "PS256", "RS512", "ES384"])
async def test_other_algorithms_are_refused(verifier: TokenVerifier, alg: str) -> None:
    token = forge({"alg": alg}, claims(), HS_KEY.encode())
    assert "not accepted" in (await refusal(verifier, token)).description


async def test_asymmetric_token_refused_when_only_hs256_configured(
    verifier: TokenVerifier, rsa_key: Any
) -> None:
    token = sign(claims(), rsa_key, "RS256", kid="k1")
    assert "RS256 is not accepted" in (await refusal(verifier, token)).description


@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        "a.b",
        "a.b.c",
        "...",
        "e30.e30.",  # {} header: no alg
        "eyJhbGciOiJIUzI1NiJ9.bm90IGpzb24.c2ln",  # payload is not JSON
        "",
    ],
)
async def test_malformed_tokens_are_refused(verifier: TokenVerifier, token: str) -> None:
    await refusal(verifier, token)


async def test_oversized_token_is_refused_before_parsing(verifier: TokenVerifier) -> None:
    # Valid signature, but 8 KiB is the ceiling whatever the content.
    token = sign(claims(padding="x" * 9000), HS_KEY, "HS256")
    assert "exceeds 8192" in (await refusal(verifier, token)).description


async def test_description_is_safe_for_a_header() -> None:
    error = AuthError('bad "quoted" \\ value\nnext line ' + "x" * 500)
    assert '"' not in error.description
    assert "\\" not in error.description
    assert "\n" not in error.description
    assert len(error.description) <= 200
