"""`Client` (blocking) and `AsyncClient` (asyncio): every operation of both APIs, on httpx.

    with Client.from_env() as client:                      # SCHEDULER_URL, SCHEDULER_TOKEN
        created = client.create_schedule(name="nightly", cron="0 3 * * *", timezone="UTC",
                                         target={"url": "https://example.com/hook"})
        for schedule in client.iter_schedules(label=["team=billing"]):
            ...

The operation methods are generated from the OpenAPI documents (`_operations.py`); this module
holds the transport: auth, the retry loop and the page iterators' plumbing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Self

import httpx

from schedulerclient._core import (
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT_SECONDS,
    Attempt,
    Core,
)
from schedulerclient._operation import Operation
from schedulerclient._operations import AsyncOperations, SyncOperations
from schedulerclient._retry import DEFAULT_MAX_RETRIES, DEFAULT_MAX_WAIT_SECONDS, RetryPolicy
from schedulerclient._unset import UNSET


class Client(Core, SyncOperations):
    """A blocking client of the scheduler API and the notification API.

    `notification_url` defaults to `base_url` (one origin, as a gateway serves both), except
    that the default `base_url` (`make run`'s scheduler port) pairs with `make run`'s
    notification port, 8088. Idempotent calls are retried on 429/503 and connection failures:
    at most `max_retries` times, waiting at most `max_retry_wait` seconds in all (`sleep` waits;
    tests pass their own). `transport` replaces httpx's network transport.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait: float = DEFAULT_MAX_WAIT_SECONDS,
        notification_url: str | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(
            base_url,
            token,
            notification_url=notification_url,
            policy=RetryPolicy(max_retries=max_retries, max_wait_seconds=max_retry_wait),
        )
        self._http = httpx.Client(timeout=timeout, transport=transport, follow_redirects=False)
        self._sleep = sleep

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> Self:
        """A client for `SCHEDULER_URL` with `SCHEDULER_TOKEN` (and `NOTIFICATION_URL`);
        keyword arguments win over the environment."""
        return cls(**{**cls.env_arguments(environ), **kwargs})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _send(
        self,
        op: Operation,
        *,
        path: Mapping[str, object] | None = None,
        query: Mapping[str, object] | None = None,
        headers: Mapping[str, object] | None = None,
        body: object = UNSET,
    ) -> Any:
        request = self._build(self._http, op, path, query, headers, body)
        retries, waited = 0, 0.0
        while True:
            attempt: Attempt
            try:
                attempt = self._http.send(request)
            except httpx.TransportError as exc:
                attempt = exc
            delay = self._retry_delay(op, attempt, retries, waited)
            if delay is None:
                return self._outcome(op, request, attempt)
            if isinstance(attempt, httpx.Response):
                attempt.close()
            self._sleep(delay)
            retries, waited = retries + 1, waited + delay


class AsyncClient(Core, AsyncOperations):
    """The asyncio twin of `Client`: the same methods, awaited; `iter_*` are async iterators."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait: float = DEFAULT_MAX_WAIT_SECONDS,
        notification_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(
            base_url,
            token,
            notification_url=notification_url,
            policy=RetryPolicy(max_retries=max_retries, max_wait_seconds=max_retry_wait),
        )
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport, follow_redirects=False)
        self._sleep = sleep

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> Self:
        """As `Client.from_env`."""
        return cls(**{**cls.env_arguments(environ), **kwargs})

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _send(
        self,
        op: Operation,
        *,
        path: Mapping[str, object] | None = None,
        query: Mapping[str, object] | None = None,
        headers: Mapping[str, object] | None = None,
        body: object = UNSET,
    ) -> Any:
        request = self._build(self._http, op, path, query, headers, body)
        retries, waited = 0, 0.0
        while True:
            attempt: Attempt
            try:
                attempt = await self._http.send(request)
            except httpx.TransportError as exc:
                attempt = exc
            delay = self._retry_delay(op, attempt, retries, waited)
            if delay is None:
                return self._outcome(op, request, attempt)
            if isinstance(attempt, httpx.Response):
                await attempt.aclose()
            await self._sleep(delay)
            retries, waited = retries + 1, waited + delay
