"""Whatever arrives, verify() answers with a Principal or an AuthError, never anything else."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from authclient import AuthError, Principal, TokenVerifier

from .conftest import HS_KEY, NOW, Clock, claims, forge, hs_settings

VERIFIER = TokenVerifier(hs_settings(), clock=Clock())

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)
claim_names = st.sampled_from(["sub", "tenant_id", "scope", "exp", "nbf", "iat", "aud", "iss"])


def outcome(token: str) -> Principal | AuthError:
    try:
        return asyncio.run(VERIFIER.verify(token))
    except AuthError as exc:
        return exc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_arbitrary_text_is_refused(token: str) -> None:
    assert isinstance(outcome(token), AuthError)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(claim_names, json_values, max_size=4))
def test_correctly_signed_odd_claims_never_crash(overrides: dict[str, Any]) -> None:
    payload = claims(**overrides)
    result = outcome(forge({"alg": "HS256"}, payload, HS_KEY.encode()))
    if isinstance(result, Principal):
        # Accepted only with the claims a principal needs, as the right types.
        assert isinstance(payload["tenant_id"], str)
        assert result.tenant_id == payload["tenant_id"]
        assert isinstance(payload["sub"], str)
        assert payload["exp"] > NOW - 30


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=5), json_values, max_size=4))
@example({"alg": []})  # unhashable: once a TypeError from the algorithm check
@example({"alg": {"a": 1}, "kid": "k"})
def test_odd_headers_never_crash(header: dict[str, Any]) -> None:
    result = outcome(forge({"alg": "HS256", **header}, claims(), HS_KEY.encode()))
    if isinstance(result, Principal):
        assert header.get("alg", "HS256") == "HS256"
