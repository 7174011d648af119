"""`answer_both_slash_forms(app)`: `/v1/schedules` answers exactly like `/v1/schedules/`.

Starlette's default answers the other form with a 307 and an empty body, which under `curl -s`
looks like nothing happened (and a client that does not follow redirects on POST loses the
request). Here a path that matches no route is tried once more with its trailing slash toggled,
and served directly when that form matches; only unmatched requests pay for the second try.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.routing import Match
from starlette.types import Receive, Scope, Send

_TRIED = "servicekit.slash_toggled"


def _toggled(path: str) -> str:
    return path[:-1] if path.endswith("/") else path + "/"


def answer_both_slash_forms(app: FastAPI) -> None:
    router = app.router
    router.redirect_slashes = False
    fallback = router.default

    async def toggled_or_fallback(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path not in ("", "/") and not scope.get(_TRIED):
            twin: Scope = {**scope, "path": _toggled(path), _TRIED: True}
            raw = scope.get("raw_path")
            if isinstance(raw, bytes) and raw:
                twin["raw_path"] = raw[:-1] if raw.endswith(b"/") else raw + b"/"
            if any(route.matches(twin)[0] is not Match.NONE for route in router.routes):
                # In place: error handlers (a 405's Allow) and metrics see the path served.
                scope.update(twin)
                await router.app(scope, receive, send)
                return
        await fallback(scope, receive, send)

    router.default = toggled_or_fallback
