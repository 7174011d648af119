"""RS256/ES256/EdDSA verification from a JWKS file, and algorithm-confusion refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from authclient import AuthError, AuthSettings, TokenVerifier

from .conftest import HS_KEY, Clock, claims, forge, jwks_bytes, public_jwk, sign


@pytest.fixture
def jwks_file(tmp_path: Path, rsa_key: Any, ec_key: Any, ed_key: Any) -> Path:
    path = tmp_path / "jwks.json"
    path.write_bytes(
        jwks_bytes(
            public_jwk(rsa_key, "rsa-1", use="sig", alg="RS256"),
            public_jwk(ec_key, "ec-1"),
            public_jwk(ed_key, "ed-1"),
        )
    )
    return path


@pytest.fixture
def verifier(jwks_file: Path, clock: Clock) -> TokenVerifier:
    return TokenVerifier(AuthSettings(AUTH_JWKS_FILE=jwks_file), clock=clock)


async def refusal(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(AuthError) as caught:
        await verifier.verify(token)
    return caught.value.description


@pytest.mark.parametrize(
    ("key_fixture", "alg", "kid"),
    [("rsa_key", "RS256", "rsa-1"), ("ec_key", "ES256", "ec-1"), ("ed_key", "EdDSA", "ed-1")],
)
async def test_each_key_type_verifies_its_algorithm(
    verifier: TokenVerifier, request: pytest.FixtureRequest, key_fixture: str, alg: str, kid: str
) -> None:
    key = request.getfixturevalue(key_fixture)
    principal = await verifier.verify(sign(claims(tenant_id="t-9"), key, alg, kid=kid))
    assert principal.tenant_id == "t-9"


async def test_unknown_kid_is_refused(verifier: TokenVerifier, rsa_key_2: Any) -> None:
    token = sign(claims(), rsa_key_2, "RS256", kid="not-published")
    assert await refusal(verifier, token) == "token kid is unknown"


async def test_missing_kid_is_refused(verifier: TokenVerifier, rsa_key: Any) -> None:
    assert await refusal(verifier, sign(claims(), rsa_key, "RS256")) == "token has no kid"


async def test_known_kid_signed_by_another_key_is_refused(
    verifier: TokenVerifier, rsa_key_2: Any
) -> None:
    token = sign(claims(), rsa_key_2, "RS256", kid="rsa-1")
    assert "signature" in await refusal(verifier, token)


def pem(private_key: Any) -> bytes:
    return bytes(
        private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


async def test_hs256_signed_with_published_rsa_key_is_refused(
    verifier: TokenVerifier, rsa_key: Any
) -> None:
    # The classic confusion: the attacker HMACs with the public key a naive verifier would use.
    token = forge({"alg": "HS256", "kid": "rsa-1"}, claims(), pem(rsa_key))
    assert await refusal(verifier, token) == "algorithm HS256 is not accepted"


async def test_hs256_confusion_refused_even_when_hs256_is_also_configured(
    jwks_file: Path, clock: Clock, rsa_key: Any
) -> None:
    # With both sources, an HS256 token is checked against the shared key only, never a JWK.
    both = TokenVerifier(AuthSettings(AUTH_JWKS_FILE=jwks_file, AUTH_HS256_KEY=HS_KEY), clock=clock)
    token = forge({"alg": "HS256", "kid": "rsa-1"}, claims(), pem(rsa_key))
    assert "signature" in await refusal(both, token)
    assert (await both.verify(sign(claims(), HS_KEY, "HS256"))).subject == "user-1"
    assert (await both.verify(sign(claims(), rsa_key, "RS256", kid="rsa-1"))).subject == "user-1"


async def test_header_alg_must_match_the_key_type(verifier: TokenVerifier, ec_key: Any) -> None:
    # An ES256 signature presented under the RSA key's kid: the key decides, not the header.
    token = sign(claims(), ec_key, "ES256", kid="rsa-1")
    assert await refusal(verifier, token) == "token algorithm does not match its key"


async def test_alg_none_with_a_valid_kid_is_refused(verifier: TokenVerifier) -> None:
    token = forge({"alg": "none", "kid": "rsa-1"}, claims(), None)
    assert await refusal(verifier, token) == "token algorithm is not accepted"


async def test_missing_tenant_id_is_refused(verifier: TokenVerifier, ed_key: Any) -> None:
    token = sign(claims(tenant_id=None), ed_key, "EdDSA", kid="ed-1")
    assert await refusal(verifier, token) == "token has no tenant_id claim"


@pytest.mark.parametrize(
    "unusable",
    [
        {"kty": "oct", "kid": "sym", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"},
        "private",
        "wrong-alg",
        "encryption-use",
        "short-rsa",
    ],
)
async def test_unusable_jwks_entries_are_skipped(
    tmp_path: Path, clock: Clock, rsa_key: Any, unusable: Any
) -> None:
    entries: dict[str, Any] = {
        "private": {
            **public_jwk(rsa_key, "x"),
            "d": "AQAB",  # any private member disqualifies the entry
        },
        "wrong-alg": public_jwk(rsa_key, "x", alg="PS256"),
        "encryption-use": public_jwk(rsa_key, "x", use="enc"),
        "short-rsa": lambda: public_jwk(rsa.generate_private_key(65537, 1024), "x"),
    }
    entry = unusable if isinstance(unusable, dict) else entries[unusable]
    entry = entry() if callable(entry) else entry
    path = tmp_path / "jwks.json"
    path.write_bytes(jwks_bytes(entry, {"kty": "RSA", "kid": "junk"}, "not-an-object"))
    verifier = TokenVerifier(AuthSettings(AUTH_JWKS_FILE=path), clock=clock)
    # Had the entry been used, the refusal would be about the signature, not the kid.
    token = sign(claims(), rsa_key, "RS256", kid=entry["kid"])
    assert await refusal(verifier, token) == "token kid is unknown"


async def test_file_rotation_is_picked_up_on_unknown_kid(
    jwks_file: Path, verifier: TokenVerifier, clock: Clock, rsa_key: Any, rsa_key_2: Any
) -> None:
    await verifier.verify(sign(claims(), rsa_key, "RS256", kid="rsa-1"))
    jwks_file.write_bytes(jwks_bytes(public_jwk(rsa_key_2, "rsa-2")))
    token = sign(claims(), rsa_key_2, "RS256", kid="rsa-2")
    # Within the refetch interval the new kid is unknown; after it, one reread finds it.
    assert await refusal(verifier, token) == "token kid is unknown"
    clock.advance(30)
    assert (await verifier.verify(token)).subject == "user-1"
    assert verifier.jwks is not None
    assert verifier.jwks.fetch_count == 2


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"x" * 70_000, "exceeds 65536 bytes"),
        (b"not json", "not valid JSON"),
        (b'{"keys": {}}', "no keys array"),
        (b"[]", "no keys array"),
        (jwks_bytes(*({"kty": "RSA", "kid": str(i)} for i in range(51))), "more than 50 keys"),
    ],
)
async def test_bad_jwks_documents_are_refused(
    tmp_path: Path, clock: Clock, rsa_key: Any, content: bytes, expected: str
) -> None:
    path = tmp_path / "jwks.json"
    path.write_bytes(content)
    verifier = TokenVerifier(AuthSettings(AUTH_JWKS_FILE=path), clock=clock)
    assert expected in await refusal(verifier, sign(claims(), rsa_key, "RS256", kid="rsa-1"))


async def test_missing_file_is_refused(tmp_path: Path, clock: Clock, rsa_key: Any) -> None:
    verifier = TokenVerifier(AuthSettings(AUTH_JWKS_FILE=tmp_path / "absent.json"), clock=clock)
    token = sign(claims(), rsa_key, "RS256", kid="rsa-1")
    assert await refusal(verifier, token) == "JWKS file cannot be read"
