"""JWKS over HTTP from a real aiohttp server on loopback: caching, rotation, kid-spam, limits."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from authclient import AuthError, AuthSettings, TokenVerifier
from tests.support.http import serve_on_loopback

from .conftest import Clock, claims, jwks_bytes, public_jwk, sign


class JwksServer:
    """Serves `document` at /jwks.json and counts requests; `mode` switches failure behaviours."""

    def __init__(self) -> None:
        self.document = b'{"keys": []}'
        self.mode = "ok"
        self.hits = 0
        self.release = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        if self.mode == "error":
            return web.Response(status=500, text="boom")
        if self.mode == "redirect":
            raise web.HTTPFound("/elsewhere")
        if self.mode == "hang":
            await self.release.wait()
        if self.mode == "chunked":
            response = web.StreamResponse()
            await response.prepare(request)
            for _ in range(100):  # 100 KiB with no Content-Length
                await response.write(b" " * 1024)
            await response.write_eof()
            return response
        return web.Response(body=self.document, content_type="application/json")


@pytest.fixture
async def server() -> AsyncIterator[JwksServer]:
    state = JwksServer()
    app = web.Application()
    app.router.add_get("/jwks.json", state.handle)
    async with serve_on_loopback(app) as port:
        state.url = f"http://127.0.0.1:{port}/jwks.json"
        try:
            yield state
        finally:
            state.release.set()  # a "hang" handler must finish before the server shuts down


def make_verifier(server: JwksServer, clock: Clock, **overrides: Any) -> TokenVerifier:
    settings = AuthSettings(AUTH_JWKS_URL=server.url, **overrides)
    return TokenVerifier(settings, clock=clock)


async def test_keys_are_fetched_once_and_cached(
    server: JwksServer, clock: Clock, rsa_key: Any
) -> None:
    server.document = jwks_bytes(public_jwk(rsa_key, "k1"))
    verifier = make_verifier(server, clock)
    token = sign(claims(), rsa_key, "RS256", kid="k1")
    for _ in range(5):
        assert (await verifier.verify(token)).tenant_id == "tenant-a"
    assert server.hits == 1


async def test_concurrent_cold_start_fetches_once(
    server: JwksServer, clock: Clock, ec_key: Any
) -> None:
    server.document = jwks_bytes(public_jwk(ec_key, "k1"))
    verifier = make_verifier(server, clock)
    token = sign(claims(), ec_key, "ES256", kid="k1")
    results = await asyncio.gather(*(verifier.verify(token) for _ in range(20)))
    assert {principal.subject for principal in results} == {"user-1"}
    assert server.hits == 1


async def test_rotation_new_kid_triggers_refetch(
    server: JwksServer, clock: Clock, rsa_key: Any, rsa_key_2: Any
) -> None:
    server.document = jwks_bytes(public_jwk(rsa_key, "old"))
    verifier = make_verifier(server, clock)
    await verifier.verify(sign(claims(), rsa_key, "RS256", kid="old"))
    # The provider publishes the new key alongside the old one, then starts signing with it.
    server.document = jwks_bytes(public_jwk(rsa_key, "old"), public_jwk(rsa_key_2, "new"))
    clock.advance(30)  # past the minimum refetch interval, well inside the 300 s cache TTL
    assert (await verifier.verify(sign(claims(), rsa_key_2, "RS256", kid="new"))).subject
    assert (await verifier.verify(sign(claims(), rsa_key, "RS256", kid="old"))).subject
    assert server.hits == 2


async def test_kid_spam_is_rate_limited(server: JwksServer, clock: Clock, ed_key: Any) -> None:
    server.document = jwks_bytes(public_jwk(ed_key, "k1"))
    verifier = make_verifier(server, clock)

    async def spam(count: int) -> None:
        for _ in range(count):
            token = sign(claims(), ed_key, "EdDSA", kid=uuid.uuid4().hex)
            with pytest.raises(AuthError, match="kid is unknown"):
                await verifier.verify(token)

    await spam(50)
    assert server.hits == 1  # the initial load only: the spam came within 30 s of it
    clock.advance(30)
    await spam(50)
    assert server.hits == 2  # one refetch per interval, however many unknown kids
    clock.advance(29)
    await spam(10)
    assert server.hits == 2
    # Legitimate traffic keeps working throughout.
    assert (await verifier.verify(sign(claims(), ed_key, "EdDSA", kid="k1"))).subject


async def test_cache_expiry_drops_a_withdrawn_key(
    server: JwksServer, clock: Clock, rsa_key: Any, rsa_key_2: Any
) -> None:
    server.document = jwks_bytes(public_jwk(rsa_key, "k1"))
    verifier = make_verifier(server, clock, AUTH_JWKS_CACHE_SECONDS=120)
    old_token = sign(claims(exp=int(clock.now) + 3600), rsa_key, "RS256", kid="k1")
    await verifier.verify(old_token)
    server.document = jwks_bytes(public_jwk(rsa_key_2, "k2"))  # k1 revoked
    clock.advance(119)
    await verifier.verify(old_token)  # still cached
    clock.advance(1)
    with pytest.raises(AuthError, match="kid is unknown"):
        await verifier.verify(old_token)
    assert server.hits == 2


async def test_outage_keeps_serving_cached_keys(
    server: JwksServer, clock: Clock, rsa_key: Any
) -> None:
    server.document = jwks_bytes(public_jwk(rsa_key, "k1"))
    verifier = make_verifier(server, clock)
    token = sign(claims(exp=int(clock.now) + 7200), rsa_key, "RS256", kid="k1")
    await verifier.verify(token)
    server.mode = "error"
    clock.advance(301)  # cache expired, provider down
    for _ in range(10):
        assert (await verifier.verify(token)).subject == "user-1"
    assert server.hits == 2  # one failed refresh, then rate-limited


async def test_cold_start_failure_is_refused_and_rate_limited(
    server: JwksServer, clock: Clock, rsa_key: Any
) -> None:
    server.mode = "error"
    verifier = make_verifier(server, clock)
    token = sign(claims(), rsa_key, "RS256", kid="k1")
    with pytest.raises(AuthError, match="answered 500"):
        await verifier.verify(token)
    for _ in range(10):
        with pytest.raises(AuthError, match="retrying later"):
            await verifier.verify(token)
    assert server.hits == 1
    server.mode = "ok"
    server.document = jwks_bytes(public_jwk(rsa_key, "k1"))
    clock.advance(30)
    assert (await verifier.verify(token)).subject == "user-1"


@pytest.mark.parametrize(
    ("mode", "document", "expected"),
    [
        ("ok", b" " * 70_000, "exceeds 65536 bytes"),  # refused from Content-Length
        ("chunked", b"", "exceeds 65536 bytes"),  # refused while reading
        ("redirect", b"", "answered 302"),  # redirects are not followed
        ("ok", b"<html>", "not valid JSON"),
    ],
)
async def test_bad_responses_are_refused(
    server: JwksServer, clock: Clock, rsa_key: Any, mode: str, document: bytes, expected: str
) -> None:
    server.mode = mode
    server.document = document
    verifier = make_verifier(server, clock)
    with pytest.raises(AuthError, match=expected):
        await verifier.verify(sign(claims(), rsa_key, "RS256", kid="k1"))


async def test_hanging_endpoint_times_out(server: JwksServer, clock: Clock, rsa_key: Any) -> None:
    # The one real wait in this suite: the client's own 0.2 s timeout against a server that never
    # answers; the test asserts the verifier gives up rather than hanging.
    server.mode = "hang"
    verifier = make_verifier(server, clock, AUTH_JWKS_TIMEOUT_SECONDS=0.2)
    with pytest.raises(AuthError, match="unreachable"):
        await asyncio.wait_for(verifier.verify(sign(claims(), rsa_key, "RS256", kid="k1")), 5)


async def test_injected_http_fetch_is_used_and_size_checked(clock: Clock, rsa_key: Any) -> None:
    requested: list[str] = []
    document = jwks_bytes(public_jwk(rsa_key, "k1"))

    async def fetch(url: str) -> bytes:
        requested.append(url)
        return document

    settings = AuthSettings(AUTH_JWKS_URL="https://idp.invalid/jwks")
    verifier = TokenVerifier(settings, clock=clock, http_fetch=fetch)
    assert (await verifier.verify(sign(claims(), rsa_key, "RS256", kid="k1"))).subject
    assert requested == ["https://idp.invalid/jwks"]

    document = b" " * 70_000
    clock.advance(301)
    fresh = TokenVerifier(settings, clock=clock, http_fetch=fetch)
    with pytest.raises(AuthError, match="exceeds"):
        await fresh.verify(sign(claims(), rsa_key, "RS256", kid="k1"))
