"""The console as an ASGI app: the files under `static/` with strict security headers.

No template, no build step, no CDN: the package directory is the site, so installing the project
is all it takes. The Content-Security-Policy allows scripts, styles and requests from this origin
only (no inline script or style), so a tenant string that ever reached the DOM as markup still
could not run.
"""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from servicekit.http.security_headers import SecurityHeadersMiddleware

STATIC_DIR = Path(__file__).parent / "static"

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    # Revalidate each load: an upgraded console never runs beside stale modules.
    (b"cache-control", b"no-cache"),
]


def create_console_app() -> ASGIApp:
    """`/` is index.html; everything else a file under static/ (404 otherwise)."""
    files = StaticFiles(directory=STATIC_DIR, html=True)
    # Starlette turns the files' HTTPException (a missing file) into a plain 404.
    return SecurityHeadersMiddleware(
        Starlette(routes=[Mount("/", app=files)]), headers_for=lambda _path: SECURITY_HEADERS
    )
