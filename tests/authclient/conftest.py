"""Keys, a settable clock and token builders shared by the authclient tests."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from authclient import AuthSettings

HS_KEY = "test-shared-hs256-key-0123456789abcdef"
AUDIENCE = "scheduler-platform"
ISSUER = "scheduler-platform-dev"
# A fixed instant (2027-01-15): tests never read the real clock for token times.
NOW = 1_800_000_000.0


class Clock:
    """Unix seconds that only move when a test says so."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


# Key generation is the slow part (RSA ~100 ms), so keys are made once per session.
@pytest.fixture(scope="session")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="session")
def rsa_key_2() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="session")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="session")
def ed_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def public_jwk(private_key: Any, kid: str, **extra: Any) -> dict[str, Any]:
    """The public JWK of a private key, with a kid."""
    public = private_key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        algorithm: Any = jwt.algorithms.RSAAlgorithm
    elif isinstance(public, ec.EllipticCurvePublicKey):
        algorithm = jwt.algorithms.ECAlgorithm
    else:
        algorithm = jwt.algorithms.OKPAlgorithm
    jwk: dict[str, Any] = algorithm.to_jwk(public, as_dict=True)
    return {**jwk, "kid": kid, **extra}


def jwks_bytes(*keys: Any) -> bytes:
    return json.dumps({"keys": list(keys)}).encode()


def claims(**overrides: Any) -> dict[str, Any]:
    """Valid claims at NOW; a value of None removes the claim."""
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "user-1",
        "tenant_id": "tenant-a",
        "scope": "schedules:read schedules:write",
        "iat": int(NOW),
        "nbf": int(NOW),
        "exp": int(NOW) + 600,
    }
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def sign(payload: dict[str, Any], key: Any, algorithm: str, kid: str | None = None) -> str:
    headers = {"kid": kid} if kid is not None else None
    return jwt.encode(payload, key, algorithm=algorithm, headers=headers)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict[str, Any], payload: dict[str, Any], hmac_key: bytes | None) -> str:
    """A token built by hand, as an attacker would: HMAC-signed with any bytes, or unsigned."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}"
    if hmac_key is None:
        return signing_input + "."
    digest = hmac.new(hmac_key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(digest)}"


def hs_settings(**overrides: Any) -> AuthSettings:
    return AuthSettings(AUTH_HS256_KEY=HS_KEY, **overrides)
