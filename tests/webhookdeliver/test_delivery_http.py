"""Deliveries to real loopback servers: headers, classification, bounds, redirects, timeouts."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from aiohttp import web

import webhookdeliver as wd

SECRET = "whsec_" + "A" * 43 + "="
NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a fixed injected clock


async def public_to_loopback(host: str, port: int) -> list[str]:
    return ["127.0.0.1"]


def delivery(url: str, **overrides: object) -> wd.Delivery:
    fields: dict[str, object] = {
        "url": url,
        "body": b'{"hello":"world"}',
        "secrets": [SECRET],
        "webhook_id": "run_01",
        "event_type": "schedule.triggered",
        "attempt": 3,
        "timeout_seconds": 5.0,
    }
    fields.update(overrides)
    return wd.Delivery(**fields)  # type: ignore[arg-type]


async def test_signed_post_carries_every_header_and_verifies(start_receiver):
    receiver = await start_receiver()
    async with wd.Deliverer(allow_private_networks=True, clock=lambda: NOW) as deliverer:
        result = await deliverer.deliver(
            delivery(receiver.url(), headers={"X-Tenant": "t1", "x-signature": "forged"})
        )
    assert result.ok
    assert result.status_code == 200
    assert result.error_kind is None
    assert result.response_excerpt == "ok"
    assert not result.retryable
    assert result.started_at.timestamp() == NOW
    assert result.started_at.tzinfo is not None
    request, body = receiver.requests[0]
    assert request.method == "POST"
    assert body == b'{"hello":"world"}'
    h = request.headers
    assert h["Content-Type"] == "application/json"
    assert h["X-Webhook-Id"] == "run_01"
    assert h["webhook-id"] == "run_01"
    assert h["X-Timestamp"] == str(int(NOW)) == h["webhook-timestamp"]
    assert h["X-Event-Type"] == "schedule.triggered"
    assert h["X-Attempt"] == "3"
    assert h["User-Agent"] == wd.DEFAULT_USER_AGENT
    assert h["X-Tenant"] == "t1"
    # The tenant's forged X-Signature was dropped, ours is the only one.
    assert h.getall("X-Signature") == [wd.sign(SECRET, "run_01", int(NOW), body)]
    assert wd.verify([SECRET], dict(h), body, now=NOW)


async def test_connections_are_kept_alive_and_reused(start_receiver, connect_log):
    receiver = await start_receiver()
    async with wd.Deliverer(allow_private_networks=True) as deliverer:
        for _ in range(5):
            assert (await deliverer.deliver(delivery(receiver.url()))).ok
    # Five sequential deliveries, one TCP connection.
    assert connect_log.attempts == [("127.0.0.1", receiver.port)]


async def test_redirect_is_not_followed(start_receiver):
    async def redirect(request: web.Request) -> web.StreamResponse:
        if request.path == "/hook":
            raise web.HTTPFound("/elsewhere")
        return web.Response(text="followed")

    receiver = await start_receiver(redirect)
    async with wd.Deliverer(allow_private_networks=True) as deliverer:
        result = await deliverer.deliver(delivery(receiver.url()))
    assert not result.ok
    assert result.status_code == 302
    assert result.error_kind == "http_status"
    assert not result.retryable
    assert [r.path for r, _ in receiver.requests] == ["/hook"]


async def test_status_classification(start_receiver):
    async def status(request: web.Request) -> web.StreamResponse:
        return web.Response(status=int(request.query["s"]), text="x")

    receiver = await start_receiver(status)
    expected = {
        200: (True, False),
        204: (True, False),
        301: (False, False),
        400: (False, False),
        404: (False, False),
        408: (False, True),
        410: (False, False),
        429: (False, True),
        500: (False, True),
        503: (False, True),
        599: (False, True),
    }
    async with wd.Deliverer(allow_private_networks=True) as deliverer:
        for code, (ok, retryable) in expected.items():
            result = await deliverer.deliver(delivery(receiver.url(f"/hook?s={code}")))
            assert (result.status_code, result.ok, result.retryable) == (code, ok, retryable)
            assert result.error_kind == (None if ok else "http_status")


async def test_retry_after_seconds_and_http_date(start_receiver):
    async def throttled(request: web.Request) -> web.StreamResponse:
        return web.Response(status=429, headers={"Retry-After": request.query["ra"]})

    receiver = await start_receiver(throttled)
    async with wd.Deliverer(allow_private_networks=True, clock=lambda: NOW) as deliverer:
        seconds = await deliverer.deliver(delivery(receiver.url("/hook?ra=120")))
        # NOW + 90 s as an IMF-fixdate, relative to the injected clock.
        date = await deliverer.deliver(
            delivery(receiver.url("/hook?ra=Thu,%2001%20Jan%202026%2000:01:30%20GMT"))
        )
    assert seconds.retry_after_seconds == 120.0
    assert seconds.retryable
    assert date.retry_after_seconds == 90.0


async def test_huge_body_is_read_only_up_to_the_bound(start_receiver):
    sent = 0
    hundred_mb = 100 * 1024 * 1024
    stopped = asyncio.Event()

    async def flood(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        response = web.StreamResponse(headers={"Content-Length": str(hundred_mb)})
        await response.prepare(request)
        chunk = b"x" * 65536
        try:
            while sent < hundred_mb:
                await response.write(chunk)
                sent += len(chunk)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            stopped.set()
        return response

    receiver = await start_receiver(flood)
    async with wd.Deliverer(allow_private_networks=True, max_response_bytes=4096) as deliverer:
        started = time.perf_counter()
        result = await deliverer.deliver(delivery(receiver.url()))
        elapsed = time.perf_counter() - started
    await asyncio.wait_for(stopped.wait(), 5)
    assert result.ok
    assert result.truncated
    assert result.response_excerpt == "x" * 1024
    # The client hung up: the server got nowhere near 100 MB out (socket buffers only).
    assert sent < 32 * 1024 * 1024
    assert elapsed < 5.0


async def test_trickling_server_hits_the_total_timeout(start_receiver):
    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(1000):  # a byte every 50 ms: never idle long, never done
            await response.write(b".")
            await asyncio.sleep(0.05)
        return response

    receiver = await start_receiver(trickle)
    async with wd.Deliverer(allow_private_networks=True) as deliverer:
        started = time.perf_counter()
        result = await deliverer.deliver(delivery(receiver.url(), timeout_seconds=0.4))
        elapsed = time.perf_counter() - started
    assert result.error_kind == "timeout"
    assert result.retryable
    assert not result.ok
    assert result.status_code == 200  # headers came; the body never finished
    assert 0.35 < elapsed < 3.0  # bounded by the 0.4 s budget, with slack for a busy CI box


async def test_server_that_never_answers_times_out(start_receiver):
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response()

    receiver = await start_receiver(hang)
    async with wd.Deliverer(allow_private_networks=True) as deliverer:
        result = await deliverer.deliver(delivery(receiver.url(), timeout_seconds=0.2))
    release.set()
    assert result.error_kind == "timeout"
    assert result.status_code is None
    assert result.retryable


async def test_connection_refused_is_a_retryable_connect_error(start_receiver):
    receiver = await start_receiver()
    port = receiver.port
    # A port that was just ours and is now closed: nothing listens there.
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    closed_port = probe.getsockname()[1]
    probe.close()
    assert closed_port != port
    async with wd.Deliverer(allow_private_networks=True) as deliverer:
        result = await deliverer.deliver(delivery(f"http://127.0.0.1:{closed_port}/"))
    assert result.error_kind == "connect"
    assert result.retryable
    assert result.status_code is None


async def test_dns_failure_is_classified_as_dns():
    async def nxdomain(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    async def empty(host: str, port: int) -> list[str]:
        return []

    for resolver in (nxdomain, empty):
        async with wd.Deliverer(resolver=resolver) as deliverer:
            result = await deliverer.deliver(delivery("https://hooks.example.com/x"))
        assert result.error_kind == "dns"
        assert result.retryable


async def test_hostname_is_pinned_to_the_resolved_address(start_receiver):
    receiver = await start_receiver()
    async with wd.Deliverer(allow_private_networks=True, resolver=public_to_loopback) as deliverer:
        result = await deliverer.deliver(delivery(receiver.url(host="hooks.example.com")))
    assert result.ok
    request, _ = receiver.requests[0]
    assert request.headers["Host"] == f"hooks.example.com:{receiver.port}"


async def test_closed_deliverer_refuses_work():
    deliverer = wd.Deliverer()
    await deliverer.close()
    with pytest.raises(RuntimeError, match="closed"):
        await deliverer.deliver(delivery("https://hooks.example.com/"))


async def test_concurrent_deliveries_keep_their_own_pins(start_receiver, connect_log):
    # Names a.* pin to the receiver's 127.0.0.1, names b.* to 127.0.0.2 where nothing listens.
    # If pins leaked between concurrent tasks, some b.* would succeed or some a.* would fail.
    receiver = await start_receiver()

    async def resolver(host: str, port: int) -> list[str]:
        await asyncio.sleep(0)  # let the other tasks interleave between lookup and connect
        return ["127.0.0.1"] if host.startswith("a") else ["127.0.0.2"]

    names = [f"{'ab'[i % 2]}{i}.example.com" for i in range(20)]
    async with wd.Deliverer(allow_private_networks=True, resolver=resolver) as deliverer:
        results = await asyncio.gather(
            *(deliverer.deliver(delivery(receiver.url(host=name))) for name in names)
        )
    for name, result in zip(names, results, strict=True):
        assert result.ok == name.startswith("a"), (name, result)
        if not result.ok:
            assert result.error_kind == "connect"
    hosts = {request.headers["Host"].split(":")[0] for request, _ in receiver.requests}
    assert hosts == {name for name in names if name.startswith("a")}
    assert {host for host, _ in connect_log.attempts} == {"127.0.0.1", "127.0.0.2"}


async def test_pinned_resolver_fails_closed_without_a_vetted_pin():
    from webhookdeliver.deliverer import _PinnedResolver

    resolver = _PinnedResolver(allow_private_networks=True)
    with pytest.raises(OSError, match="no vetted address"):
        await resolver.resolve("hooks.example.com", 443)


def test_delivery_refuses_programming_errors():
    for bad in (
        {"secrets": []},
        {"attempt": 0},
        {"webhook_id": "a\r\nb"},
        {"event_type": ""},
        {"timeout_seconds": 0},
    ):
        with pytest.raises(ValueError):
            delivery("https://hooks.example.com/", **bad)


async def _raw_server(answer: bytes) -> asyncio.Server:
    """A loopback TCP server that reads the request's first bytes and answers `answer` as is."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.write(answer)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize(
    ("answer", "needle"),
    [
        (b"HELLO\r\n\r\n", "Bad status line"),
        (b"HTTP/1.1 2OO OK\r\nContent-Length: 0\r\n\r\n", "Invalid status code"),
        (b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", "Invalid header token"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab", "not completed"),
    ],
)
async def test_a_target_that_answers_garbage_is_a_protocol_error(answer, needle):
    server = await _raw_server(answer)
    port = server.sockets[0].getsockname()[1]
    try:
        async with wd.Deliverer(allow_private_networks=True) as deliverer:
            result = await deliverer.deliver(delivery(f"http://127.0.0.1:{port}/"))
    finally:
        server.close()
        await server.wait_closed()
    assert result.error_kind == "protocol", result
    assert result.error_message is not None
    assert result.error_message.startswith("malformed response: ")
    assert needle in result.error_message
    assert "\n" not in result.error_message
    assert result.retryable
    assert not result.ok


async def test_a_target_that_closes_without_answering_is_a_connect_error():
    server = await _raw_server(b"")
    port = server.sockets[0].getsockname()[1]
    try:
        async with wd.Deliverer(allow_private_networks=True) as deliverer:
            result = await deliverer.deliver(delivery(f"http://127.0.0.1:{port}/"))
    finally:
        server.close()
        await server.wait_closed()
    assert result.error_kind == "connect", result
    assert result.retryable
