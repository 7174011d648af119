"""Security headers on every HTTP response (pure ASGI middleware), chosen per path.

Both APIs mount `SecurityHeadersMiddleware(app)` (their own ports), and the console's gateway
wraps every routed app in it too, so `/v1` answers carry the same headers on the one origin as
the console's pages do. A header the app set itself is left as it is.

API answers are JSON: `Content-Security-Policy: default-src 'none'` lets a browser that was
tricked into rendering one as a document load and run nothing. The interactive docs pages
(`DOCS_PATHS`, `DOCS_PREFIX`) need their packaged scripts and Swagger UI's inline start-up
script, so they keep only the frame policy in their CSP; everything else is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

Headers = Sequence[tuple[bytes, bytes]]

_COMMON: Headers = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)
API_CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'"
DOCS_CONTENT_SECURITY_POLICY = "frame-ancestors 'none'"
API_HEADERS: Headers = (
    (b"content-security-policy", API_CONTENT_SECURITY_POLICY.encode()),
    *_COMMON,
)
DOCS_HEADERS: Headers = (
    (b"content-security-policy", DOCS_CONTENT_SECURITY_POLICY.encode()),
    *_COMMON,
)
DOCS_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})
"""The pages of `servicekit.http.docs.offline_docs_app` (FastAPI's and fastapi-offline's
defaults), and the prefix their assets are served under."""
DOCS_PREFIX = "/static-offline-docs/"


def api_headers_for(path: str) -> Headers:
    """API_HEADERS, or DOCS_HEADERS for the docs pages and their assets."""
    if path in DOCS_PATHS or path.startswith(DOCS_PREFIX):
        return DOCS_HEADERS
    return API_HEADERS


class SecurityHeadersMiddleware:
    """Adds `headers_for(path)` to every HTTP response of the wrapped app, except the names the
    app already set."""

    def __init__(
        self, app: ASGIApp, *, headers_for: Callable[[str], Headers] = api_headers_for
    ) -> None:
        self.app = app
        self.headers_for = headers_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = self.headers_for(scope.get("path", "/"))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                headers.extend((k, v) for k, v in extra if k not in names)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
