"""An overall deadline per API request (pure ASGI middleware): a request that has not started
its response within `seconds` is answered 503 problem+json with `Retry-After`, and its handler
is cancelled.

The database bounds (`servicekit.data.database`) bound each stage of a call, but they add up: a
pooled connection that hung a moment ago is used without a ping, its statement waits out the
driver's round-trip bound, then the rollback behind it waits again. This bound holds by
construction whatever the handler waits on: the answer goes out on the timer, and the cancelled
handler releases its connection in the background (its own cleanup stays bounded by the database
bounds). Once a response has started, the write deadline of the server protocol takes over.

`overrides` gives a path its own deadline (a bulk route doing minutes of bounded work); a path
matches with or without its trailing slash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from servicekit.http.body_limit import path_key
from servicekit.http.problems import instance_of, problem_response
from servicekit.http.unavailable import RETRY_AFTER_SECONDS
from servicekit.logging import RATE_LIMITED

log = logging.getLogger("servicekit.http.deadline")

# Cancelled handlers still finishing their cleanup; held so that they are not collected midway.
_abandoned: set[asyncio.Task[None]] = set()


class RequestDeadlineMiddleware:
    def __init__(
        self, app: ASGIApp, *, seconds: float, overrides: Mapping[str, float] | None = None
    ) -> None:
        if seconds <= 0 or any(s <= 0 for s in (overrides or {}).values()):
            raise ValueError("the request deadline must be > 0 s")
        self.app = app
        self.seconds = seconds
        self.overrides = {path_key(p): s for p, s in (overrides or {}).items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seconds = self.overrides.get(path_key(scope.get("path", "")), self.seconds)
        started = expired = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if expired:
                return  # the 503 went out; the cancelled handler's answer is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, guarded_send))
        try:
            await asyncio.wait({task}, timeout=seconds)
            if task.done() or started:
                await task  # a started response streams on (or the handler's error propagates)
                return
        except asyncio.CancelledError:
            task.cancel()
            raise
        expired = True
        task.cancel()
        _abandoned.add(task)
        task.add_done_callback(_reap)
        log.warning(
            "%s %s: no response within %s s; answered 503",
            scope.get("method", ""),
            scope.get("path", ""),
            seconds,
            extra={RATE_LIMITED: True},
        )
        response = problem_response(
            503,
            slug="unavailable",
            detail=f"the request did not complete within {seconds:g} s; retry later",
            instance=instance_of(scope),
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
        await response(scope, receive, send)


def _reap(task: asyncio.Task[None]) -> None:
    _abandoned.discard(task)
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            exc = task.exception()
            if exc is not None:
                log.info("a cancelled request ended with %s", type(exc).__name__)
