"""Request body cap for both APIs (pure ASGI middleware).

A body above `limit` bytes is refused with 413 problem+json: from `Content-Length` before the app
runs, or, for chunked uploads, as soon as the streamed bytes pass the limit. The middleware sends
that 413 itself, so both services answer the same bytes whatever their exception handlers do, and
an endpoint never buffers more than the limit. `Connection: close` ends the connection after the
answer: the server protocol discards the rest of the upload (within the body deadline, at most
`LINGER_SECONDS`) before closing, so that the client reads the 413 rather than a reset.

`overrides` gives a path its own limit (`{"/v1/schedules/apply": 4 MiB}`: a bulk route that must
take a larger body while every other route keeps the small one); a path matches with or without
its trailing slash, as the apps answer both forms.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from servicekit.http.problems import PROBLEM_MEDIA_TYPE, TYPE_PREFIX, instance_of

DEFAULT_MAX_REQUEST_BYTES = 256 * 1024


class BodyTooLarge(HTTPException):
    """Raised from `receive` past the limit: FastAPI re-raises HTTPExceptions from body parsing
    (any other error would become a 400), and the 413 is already on the wire by then."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")


class BodyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, limit: int, overrides: Mapping[str, int] | None = None
    ) -> None:
        self.app = app
        self.limit = limit
        self.overrides = {path_key(p): n for p, n in (overrides or {}).items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.overrides.get(path_key(scope.get("path", "")), self.limit)
        if _declared_length(scope) > limit:
            await _send_problem(send, limit, scope)
            return
        seen = 0
        started = refused = False

        async def limited_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    if not started and not refused:
                        refused = True
                        await _send_problem(send, limit, scope)
                    raise BodyTooLarge(limit)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # our 413 went out; the app's rendering of BodyTooLarge is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except BodyTooLarge:
            if not refused:
                raise


def path_key(path: str) -> str:
    """A path as the per-path overrides match it: without its trailing slash."""
    return path.rstrip("/") or "/"


def _declared_length(scope: Scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1  # the server refuses a malformed length itself
    return -1


async def _send_problem(send: Send, limit: int, scope: Scope) -> None:
    body = json.dumps(
        {
            "type": f"{TYPE_PREFIX}payload-too-large",
            "title": "Content Too Large",
            "status": 413,
            "detail": f"request body larger than {limit} bytes",
            "instance": instance_of(scope),
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
