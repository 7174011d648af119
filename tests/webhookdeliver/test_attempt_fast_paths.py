"""The per-attempt shortcuts give exactly what the long way gives: remembered HMAC keys, one
signed message for both schemes, the deadline, the one-read response and the ASCII excerpt."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from typing import Any

import pytest
from aiohttp import web

import webhookdeliver as wd

TS = 1_767_225_600
BODY = b'{"schedule_id":"sch_1"}'


def independent_signatures(secrets: list[str], wid: str, body: bytes) -> tuple[str, str]:
    message = f"{wid}.{TS}.".encode() + body
    x = ", ".join(
        "sha256=" + hmac.new(s.encode(), message, hashlib.sha256).hexdigest() for s in secrets
    )

    def std_key(secret: str) -> bytes:
        try:
            key = base64.b64decode(secret.removeprefix("whsec_") + "==")
        except ValueError:
            key = b""
        return key if secret.startswith("whsec_") and key else secret.encode()

    std = " ".join(
        "v1," + base64.b64encode(hmac.new(std_key(s), message, hashlib.sha256).digest()).decode()
        for s in secrets
    )
    return x, std


def headers(secrets: list[str], wid: str = "run_1", body: bytes = BODY, **kw: object):
    return wd.build_headers(
        secrets=secrets,
        webhook_id=wid,
        event_type="schedule.triggered",
        attempt=2,
        timestamp=TS,
        body=body,
        user_agent="ua",
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "secrets",
    [
        [wd.generate_secret()],
        [wd.generate_secret(), wd.generate_secret()],
        ["not-a-whsec-secret"],  # keyed on its UTF-8 bytes in both schemes
        ["whsec_%%%not base64%%%", "whsec_"],  # undecodable and empty keys: UTF-8 bytes too
        ["whsec_c2VjcmV0", "pässwörd"],
    ],
)
def test_remembered_keys_sign_like_a_fresh_hmac_every_time(secrets: list[str]) -> None:
    # The same secrets over and over (the cache hits) with different ids and bodies: a keyed
    # state that any use mutated would drift from the independent answer.
    for n in range(3):
        wid, body = f"run_{n}", BODY + b" " * n
        got = headers(secrets, wid, body)
        assert (got["X-Signature"], got["webhook-signature"]) == independent_signatures(
            secrets, wid, body
        )
        assert got["X-Signature"] == wd.signature_header(secrets, wid, TS, body)
        assert got["webhook-signature"] == wd.standard_webhooks_signature(secrets, wid, TS, body)
        assert wd.verify(secrets, got, body, now=TS)


def test_build_headers_refuses_no_secrets_and_keeps_order_and_precedence() -> None:
    with pytest.raises(ValueError, match="secret"):
        headers([])
    secret = wd.generate_secret()
    context = {"X-Schedule-Id": "sch_1", "X-Trigger": "manual"}
    plain = headers([secret], context=context)
    assert (
        plain
        == headers([secret], context=context, extra={})
        == headers([secret], context=context, extra=None)
    )
    assert list(plain)[:2] == ["X-Schedule-Id", "X-Trigger"]  # context first, ours after
    with_tenant = headers([secret], context=context, extra={"X-Tenant": "t", "X-Trigger": "x"})
    assert list(with_tenant) == ["X-Tenant", *plain]
    assert with_tenant["X-Trigger"] == "manual"


def delivery(url: str = "https://example.com/", **overrides: Any) -> wd.Delivery:
    fields: dict[str, Any] = {
        "url": url,
        "body": b"{}",
        "secrets": ["whsec_c2VjcmV0"],
        "webhook_id": "run_1",
        "event_type": "schedule.triggered",
        "attempt": 1,
    }
    return wd.Delivery(**{**fields, **overrides})


@pytest.mark.parametrize(
    "context",
    [  # (a name not ours: test_headers.py)
        {"X-Trigger": "a\nb"},
        {"X-Trigger": "é"},
        {"X-Schedule-Id": "s" * 257},
    ],
)
def test_context_header_values_are_refused_on_every_rule(context: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="context header"):
        delivery(context_headers=context)


def test_context_header_values_may_hold_tabs_and_256_characters() -> None:
    delivery(context_headers={"X-Trigger": "a\tb", "x-schedule-id": "s" * 256})


async def test_bodies_in_pieces_exactly_at_the_bound_empty_and_non_ascii(start_receiver):
    async def pieces(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()  # chunked: no length, the end comes later
        await response.prepare(request)
        for part in (b"ab", b"cd", b"ef"):
            await response.write(part)
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    async def exact(request: web.Request) -> web.Response:
        return web.Response(body=b"y" * 100)

    async def over(request: web.Request) -> web.Response:
        return web.Response(body=b"y" * 101)

    async def empty(request: web.Request) -> web.Response:
        return web.Response(body=b"")

    async def accented(request: web.Request) -> web.Response:
        return web.Response(body="é".encode() * 2000)

    receivers = {
        name: await start_receiver(handler)
        for name, handler in (
            ("pieces", pieces),
            ("exact", exact),
            ("over", over),
            ("empty", empty),
            ("accented", accented),
        )
    }
    async with wd.Deliverer(allow_private_networks=True, max_response_bytes=100) as small:
        got = {name: await small.deliver(delivery(r.url())) for name, r in receivers.items()}
    async with wd.Deliverer(allow_private_networks=True) as default:
        got["accented"] = await default.deliver(delivery(receivers["accented"].url()))
    assert (got["pieces"].response_excerpt, got["pieces"].truncated) == ("abcdef", False)
    assert (got["exact"].response_excerpt, got["exact"].truncated) == ("y" * 100, False)
    assert (got["over"].response_excerpt, got["over"].truncated) == ("y" * 100, True)
    assert (got["empty"].response_excerpt, got["empty"].truncated) == (None, False)
    assert got["accented"].response_excerpt == "é" * 512  # 1 KiB of UTF-8, whole characters
    assert all(r.ok and r.error_message is None for r in got.values())
