"""TLS through the pin: connect to the vetted loopback address, keep SNI/Host = the name."""

from __future__ import annotations

import ssl

import pytest
import trustme

import webhookdeliver as wd

NAME = "hooks.tenant-example.test"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(ca: trustme.CA, name: str, seen_sni: list[str | None]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(name).configure_cert(context)

    def record_sni(sock: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        seen_sni.append(server_name)

    context.sni_callback = record_sni  # type: ignore[assignment]
    return context


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def to_loopback(calls: list[tuple[str, int]]) -> wd.Resolver:
    async def resolve(host: str, port: int) -> list[str]:
        calls.append((host, port))
        return ["127.0.0.1"]

    return resolve


def delivery(url: str) -> wd.Delivery:
    return wd.Delivery(
        url=url,
        body=b"{}",
        secrets=[wd.generate_secret()],
        webhook_id="w1",
        event_type="schedule.triggered",
        attempt=1,
        timeout_seconds=5,
    )


async def test_https_to_made_up_name_pinned_to_loopback(ca, start_receiver):
    seen_sni: list[str | None] = []
    receiver = await start_receiver(ssl_context=server_context(ca, NAME, seen_sni))
    calls: list[tuple[str, int]] = []
    async with wd.Deliverer(
        allow_private_networks=True, resolver=to_loopback(calls), ssl_context=client_context(ca)
    ) as deliverer:
        result = await deliverer.deliver(delivery(receiver.url(host=NAME, scheme="https")))
    assert result.ok, result
    assert seen_sni == [NAME]
    request, _ = receiver.requests[0]
    assert request.headers["Host"] == f"{NAME}:{receiver.port}"
    assert request.secure
    assert calls == [(NAME, receiver.port)]  # the guard resolved exactly once


async def test_certificate_for_another_name_is_a_tls_failure(ca, start_receiver):
    receiver = await start_receiver(ssl_context=server_context(ca, "other.example.test", []))
    async with wd.Deliverer(
        allow_private_networks=True, resolver=to_loopback([]), ssl_context=client_context(ca)
    ) as deliverer:
        result = await deliverer.deliver(delivery(receiver.url(host=NAME, scheme="https")))
    assert result.error_kind == "tls"
    assert not result.ok
    assert receiver.requests == []


async def test_verification_is_on_by_default(ca, start_receiver):
    # Same server, but the client only trusts the system store, not our private CA.
    receiver = await start_receiver(ssl_context=server_context(ca, NAME, []))
    async with wd.Deliverer(allow_private_networks=True, resolver=to_loopback([])) as deliverer:
        result = await deliverer.deliver(delivery(receiver.url(host=NAME, scheme="https")))
    assert result.error_kind == "tls"
    assert receiver.requests == []
