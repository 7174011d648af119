"""The one-origin gateway: a path at or under a prefix reaches that app with its path unchanged;
anything else (a longer name sharing the prefix included) reaches the console."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from console.app import CONTENT_SECURITY_POLICY, create_console_app
from console.gateway import Gateway


def _echo(name: str) -> Starlette:
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"app": name, "path": request.url.path})

    return Starlette(routes=[Route("/{rest:path}", echo, methods=["GET", "POST"])])


async def test_dispatch_by_prefix_without_rewriting_paths() -> None:
    gateway = Gateway(
        [("/v1/schedules", _echo("scheduler")), ("/v1/notifications", _echo("notification"))],
        fallback=create_console_app(),
    )
    transport = httpx.ASGITransport(app=gateway)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        for path, app in [
            ("/v1/schedules", "scheduler"),
            ("/v1/schedules/", "scheduler"),
            ("/v1/schedules/sch_1/runs/stats", "scheduler"),
            ("/v1/notifications/ntf_1/read", "notification"),
        ]:
            r = await client.get(path)
            assert r.json() == {"app": app, "path": path}
        # Not under a prefix: the console answers (its 404 for an unknown file).
        stray = await client.get("/v1/schedulesX")
        assert stray.status_code == 404
        assert stray.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        index = await client.get("/")
        assert index.status_code == 200
        assert '<script type="module" src="/js/main.js">' in index.text
        assert "<script>" not in index.text  # nothing inline: the CSP would refuse it
