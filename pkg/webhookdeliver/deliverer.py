"""The SSRF-safe webhook client: vet the target, pin the vetted address, sign, POST, classify.

One `Deliverer` owns one aiohttp `ClientSession` whose `TCPConnector` pools keep-alive
connections per host. The connector never does DNS itself: its resolver (`_PinnedResolver`) only
hands back the addresses this delivery's guard already resolved and vetted, passed down through
a context variable. So the address that was checked is the address connected to (no second
lookup, no DNS-rebinding window), while TLS SNI and `Host` keep the original name and the
certificate is verified against it. IP-literal URLs never reach a resolver in aiohttp, so the
guard checks literals on their own path (`targets.check_target_url`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType, TracebackType
from typing import Final, Literal

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.http_exceptions import HttpProcessingError

from webhookdeliver.addresses import guard_reason, parse_ip
from webhookdeliver.attempts import MAX_EXCERPT_BYTES, bound_error_message, bound_excerpt
from webhookdeliver.headers import build_headers, check_context_headers
from webhookdeliver.retry_after import parse_retry_after
from webhookdeliver.targets import (
    MAX_URL_LENGTH,
    CheckedTarget,
    ForbiddenTargetURL,
    InvalidTargetURL,
    check_target_url,
)

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""`(host, port) -> IP address strings`; the guard vets every one of them."""

ErrorKind = Literal[
    "dns", "connect", "tls", "timeout", "ssrf_blocked", "http_status", "invalid_url", "protocol"
]

DEFAULT_USER_AGENT: Final = "scheduler-platform-webhooks/0.1"
MAX_RESOLVED_ADDRESSES: Final = 64  # more than this from DNS is abuse, not load balancing
MAX_PINNED_ADDRESSES: Final = 8  # vetted addresses handed to happy-eyeballs, in DNS order
MAX_TIMEOUT_SECONDS: Final = 300.0
CHECKED_URL_CACHE_SIZE: Final = 4096  # distinct target URLs whose static check is remembered
_READ_CHUNK: Final = 65536

# The default of both header fields: one shared read-only empty mapping.
_NO_HEADERS: Final[Mapping[str, str]] = MappingProxyType({})

# (host, port, vetted addresses) of the delivery running in the current task.
_PIN: contextvars.ContextVar[tuple[str, int, tuple[str, ...]] | None] = contextvars.ContextVar(
    "webhookdeliver_pin", default=None
)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One attempt to POST `body` to `url`. `webhook_id` is stable across attempts."""

    url: str
    body: bytes
    secrets: Sequence[str] = field(repr=False)  # plaintext: never in a repr or a log
    webhook_id: str
    event_type: str
    attempt: int
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS)
    timeout_seconds: float = 10.0  # whole attempt incl. DNS and body; clamped to 300 s
    # Not in a repr: a scheduler run's completion token travels here (`completion_headers`).
    context_headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS, repr=False)
    """Ours, unsigned, beside the signed set: e.g. `occurrence_headers(...)` of a scheduler run."""

    def __post_init__(self) -> None:
        # Programming errors, not delivery outcomes: refuse them where they are made.
        if not self.secrets:
            raise ValueError("a delivery needs at least one signing secret")
        if self.attempt < 1:
            raise ValueError("attempt is 1-based")
        webhook_id, event_type = self.webhook_id, self.event_type
        if not webhook_id or not webhook_id.isprintable() or len(webhook_id) > 256:
            raise ValueError("webhook_id must be 1..256 printable characters")
        if not event_type or not event_type.isprintable() or len(event_type) > 256:
            raise ValueError("event_type must be 1..256 printable characters")
        if not self.timeout_seconds > 0:
            raise ValueError("timeout_seconds must be positive")
        check_context_headers(self.context_headers)


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """What happened. `ok` only for a 2xx; `retryable` per the classification rules.

    A response body larger than `max_response_bytes` is not an error: the read stops there
    (`truncated=True`), the connection is dropped instead of pooled, and the status decides.
    """

    ok: bool
    status_code: int | None
    error_kind: ErrorKind | None
    error_message: str | None
    duration_ms: float
    response_excerpt: str | None
    retryable: bool
    retry_after_seconds: float | None
    started_at: datetime
    truncated: bool = False


def is_retryable_status(status: int) -> bool:
    """408, 429 and 5xx are worth retrying; 2xx need no retry, 3xx and other 4xx will not heal."""
    return status in (408, 429) or 500 <= status <= 599


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """The default `Resolver`: the system's getaddrinfo, TCP addresses only, in its order."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    seen: dict[str, None] = {}
    for _family, _type, _proto, _canon, sockaddr in infos:
        seen.setdefault(str(sockaddr[0]), None)
    return list(seen)


class _PinnedResolver(AbstractResolver):
    """aiohttp's resolver hook: returns only the addresses vetted for the current delivery."""

    def __init__(self, allow_private_networks: bool) -> None:
        self._allow_private = allow_private_networks

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        pin = _PIN.get()
        name = host.lower().rstrip(".")
        if pin is None or pin[0] != name or pin[1] != port:
            # Fail closed: a lookup the guard did not vet is never performed.
            raise OSError(f"no vetted address for {host}:{port}")
        results: list[ResolveResult] = []
        for address in pin[2]:
            if guard_reason(address, allow_private_networks=self._allow_private) is not None:
                raise OSError(f"refusing forbidden address {address}")  # defence in depth
            ip = parse_ip(address)
            if ip is None:
                raise OSError(f"not an IP address: {address!r}")
            results.append(
                {
                    "hostname": host,
                    "host": address,
                    "port": port,
                    "family": socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                    "proto": 0,
                    "flags": socket.AI_NUMERICHOST,
                }
            )
        return results

    async def close(self) -> None:
        return None


def _checked_url(
    url: str, allow_private_networks: bool, allowed_ports: frozenset[int] | None
) -> CheckedTarget | tuple[ErrorKind, str]:
    """`check_target_url` as a value, remembered for URLs of a storable length: it is a pure
    function of its arguments (no DNS), and parsing and vetting the same URL on every attempt
    cost more than the signature."""
    if not isinstance(url, str) or len(url) > MAX_URL_LENGTH:  # refused anyway; not kept
        return _check_url(url, allow_private_networks, allowed_ports)
    return _remembered_check(url, allow_private_networks, allowed_ports)


def _check_url(
    url: str, allow_private_networks: bool, allowed_ports: frozenset[int] | None
) -> CheckedTarget | tuple[ErrorKind, str]:
    try:
        return check_target_url(
            url, allow_private_networks=allow_private_networks, allowed_ports=allowed_ports
        )
    except ForbiddenTargetURL as exc:
        return "ssrf_blocked", exc.reason
    except InvalidTargetURL as exc:
        return "invalid_url", exc.reason


_remembered_check = functools.lru_cache(maxsize=CHECKED_URL_CACHE_SIZE)(_check_url)


class _Refused(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message


def _excerpt_of(body: bytes) -> str | None:
    text = body[:MAX_EXCERPT_BYTES].decode("utf-8", "replace")
    # ASCII text of at most MAX_EXCERPT_BYTES characters is already in bounds.
    if text.isascii() and "\x00" not in text:
        return text or None
    return bound_excerpt(text)


def _failure_of(exc: BaseException, stage: str, timeout: float) -> tuple[ErrorKind, str, bool]:
    """(error kind, message, retryable) of an attempt that raised `exc` during `stage`. The
    checks run most specific first: aiohttp's timeouts are also ClientErrors, its TLS errors
    also connector errors, and every TimeoutError and SSLError is an OSError."""
    if isinstance(exc, _Refused):
        return exc.kind, exc.message, exc.kind != "ssrf_blocked"
    if isinstance(exc, TimeoutError):
        if stage == "dns":
            return "dns", f"DNS lookup timed out after {timeout:g}s", True
        return "timeout", f"{stage} timed out after {timeout:g}s", True
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return "tls", str(exc), True
    if isinstance(exc, aiohttp.InvalidURL):
        return "invalid_url", str(exc), False
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect", str(exc), True
    # The target answered, but not HTTP: a garbage or malformed status line, bad headers, broken
    # chunking, a body shorter than its Content-Length. Its own kind: the connection worked, the
    # receiver is what needs fixing. Still retried, like a 5xx (a half-deployed receiver).
    if isinstance(exc, aiohttp.ClientResponseError):
        return "protocol", f"malformed response: {_one_line(exc.message)}", True
    if isinstance(exc, aiohttp.ClientPayloadError | HttpProcessingError):
        return "protocol", f"malformed response: {_one_line(str(exc))}", True
    # Closed before any answer, reset: a network failure.
    return "connect", f"{type(exc).__name__}: {exc}", True


_MESSAGE_CHARS: Final = 300  # aiohttp's parser messages quote the offending bytes


def _one_line(text: str) -> str:
    return " ".join(text.split())[:_MESSAGE_CHARS]


class Deliverer:
    """Signs and POSTs webhooks through the SSRF guard. Reuse one per process; `close()` it.

    `allow_private_networks=True` is for tests and local demos only. `allowed_ports` is the
    port allow-list (None: `targets.DEFAULT_ALLOWED_PORTS`, or any port with private networks
    allowed); another port is `ssrf_blocked`. `resolver` replaces the
    system DNS (tests map made-up names to loopback with it). `ssl_context` replaces the default
    verifying context (tests trust a private CA); verification stays on either way. `clock`
    (unix seconds) stamps `X-Timestamp` and `started_at` and dates `Retry-After`.
    """

    def __init__(
        self,
        *,
        allow_private_networks: bool = False,
        allowed_ports: frozenset[int] | None = None,
        resolver: Resolver | None = None,
        max_response_bytes: int = 65536,
        user_agent: str = DEFAULT_USER_AGENT,
        connector_limit: int = 100,
        connector_limit_per_host: int = 10,
        connect_timeout_seconds: float = 5.0,
        keepalive_timeout_seconds: float = 15.0,
        clock: Callable[[], float] = time.time,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if max_response_bytes < 0:
            raise ValueError("max_response_bytes must be >= 0")
        if connector_limit < 1 or connector_limit_per_host < 0:
            raise ValueError("connector limits must be positive")
        self._allow_private = allow_private_networks
        self._allowed_ports = allowed_ports
        self._resolver: Resolver = resolver or system_resolver
        self._max_response_bytes = max_response_bytes
        self._user_agent = user_agent
        self._limit = connector_limit
        self._limit_per_host = connector_limit_per_host
        self._connect_timeout = connect_timeout_seconds
        self._keepalive_timeout = keepalive_timeout_seconds
        self._clock = clock
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    async def __aenter__(self) -> Deliverer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close pooled connections. Idempotent."""
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("Deliverer is closed")
        if self._session is None:
            connector = aiohttp.TCPConnector(
                resolver=_PinnedResolver(self._allow_private),
                use_dns_cache=False,
                limit=self._limit,
                limit_per_host=self._limit_per_host,
                keepalive_timeout=self._keepalive_timeout,
                ssl=self._ssl,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),  # tenants' cookies never travel
                auto_decompress=False,  # no decompression bombs; we ask for identity anyway
                trust_env=False,  # no proxies from the environment
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
            )
        return self._session

    async def deliver(self, delivery: Delivery) -> DeliveryResult:
        """One attempt. Never raises for network, TLS, HTTP or guard failures: see the result."""
        started_wall = self._clock()
        started = time.perf_counter()
        status: int | None = None
        excerpt: str | None = None
        retry_after: float | None = None
        truncated = False
        stage = "validate"

        def result(kind: ErrorKind | None, message: str | None, retryable: bool) -> DeliveryResult:
            return DeliveryResult(
                ok=kind is None,
                status_code=status,
                error_kind=kind,
                error_message=bound_error_message(message) if message else None,
                duration_ms=(time.perf_counter() - started) * 1000.0,
                response_excerpt=excerpt,
                retryable=retryable,
                retry_after_seconds=retry_after,
                started_at=datetime.fromtimestamp(started_wall, UTC),
                truncated=truncated,
            )

        target = _checked_url(delivery.url, self._allow_private, self._allowed_ports)
        if isinstance(target, tuple):
            return result(target[0], target[1], False)
        timeout = min(delivery.timeout_seconds, MAX_TIMEOUT_SECONDS)
        session = self._get_session()
        token = None
        try:
            async with asyncio.timeout(timeout):
                if target.ip is None:
                    stage = "dns"
                    addresses = await self._vetted_addresses(target.host, target.port)
                    token = _PIN.set((target.host, target.port, addresses))
                stage = "request"
                timestamp = int(self._clock())
                headers = build_headers(
                    secrets=delivery.secrets,
                    webhook_id=delivery.webhook_id,
                    event_type=delivery.event_type,
                    attempt=delivery.attempt,
                    timestamp=timestamp,
                    body=delivery.body,
                    user_agent=self._user_agent,
                    extra=delivery.headers,
                    context=delivery.context_headers,
                )
                async with session.post(
                    target.url, data=delivery.body, headers=headers, allow_redirects=False
                ) as response:
                    stage = "response"
                    status = response.status
                    retry_at = response.headers.get("Retry-After")
                    if retry_at is not None:
                        retry_after = parse_retry_after(retry_at, now=self._clock())
                    body, truncated = await self._read_bounded(response)
                    if truncated:
                        response.close()  # unread bytes remain: never pool this connection
                    excerpt = _excerpt_of(body)
        # TimeoutError is an OSError; aiohttp wraps parser errors, the last entry is a backstop.
        except (_Refused, aiohttp.ClientError, OSError, HttpProcessingError) as exc:
            return result(*_failure_of(exc, stage, timeout))
        finally:
            if token is not None:
                _PIN.reset(token)
        assert status is not None
        if 200 <= status <= 299:
            return result(None, None, False)
        return result("http_status", f"HTTP {status}", is_retryable_status(status))

    async def _vetted_addresses(self, host: str, port: int) -> tuple[str, ...]:
        try:
            answers = list(await self._resolver(host, port))
        except TimeoutError:
            raise
        except (OSError, UnicodeError, ValueError) as exc:
            raise _Refused("dns", f"cannot resolve {host}: {exc}") from None
        if not answers:
            raise _Refused("dns", f"no addresses for {host}")
        if len(answers) > MAX_RESOLVED_ADDRESSES:
            raise _Refused("dns", f"{host}: more than {MAX_RESOLVED_ADDRESSES} addresses")
        vetted: list[str] = []
        for answer in answers:
            ip = parse_ip(answer) if isinstance(answer, str) else None
            if ip is None:
                raise _Refused("dns", f"resolver returned a non-address {answer!r}")
            why = guard_reason(ip, allow_private_networks=self._allow_private)
            if why is not None:
                # ANY forbidden answer refuses the whole name: a mixed answer is a
                # rebinding attempt, and happy-eyeballs would try the private one.
                raise _Refused("ssrf_blocked", f"{host} resolves to {ip} ({why})")
            if str(ip) not in vetted:
                vetted.append(str(ip))
        return tuple(vetted[:MAX_PINNED_ADDRESSES])

    async def _read_bounded(self, response: aiohttp.ClientResponse) -> tuple[bytes, bool]:
        """Read at most `max_response_bytes`; True when more was left unread."""
        limit = self._max_response_bytes
        content = response.content
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            chunk = await content.read(min(_READ_CHUNK, limit - size))
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
            size += len(chunk)
            if content.at_eof():  # all of it arrived: no second read just to see the end
                return b"".join(chunks), False
        return b"".join(chunks), not content.at_eof()
