"""One origin for the console and both APIs, as the platform's gateway serves them.

    gateway = Gateway([("/v1/schedules", scheduler_app), ("/v1/subscriptions", notification_app),
                       ...], fallback=create_console_app())

A request whose path is a prefix or lies under it goes to that app with its scope unchanged (the
apps route the full `/v1/...` paths themselves); anything else goes to the fallback. The apps are
the same objects the services' own ports serve: this module imports neither service. Each routed
app is wrapped in servicekit's `SecurityHeadersMiddleware`, so every `/v1` answer on this origin
carries nosniff, a frame policy and a CSP whatever the app itself sends (the apps mount it too;
a header already set is not repeated).
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from servicekit.http.security_headers import SecurityHeadersMiddleware


class Gateway:
    def __init__(self, routes: Sequence[tuple[str, ASGIApp]], *, fallback: ASGIApp) -> None:
        self.routes: list[tuple[str, ASGIApp]] = [
            (prefix.rstrip("/"), SecurityHeadersMiddleware(app)) for prefix, app in routes
        ]
        self.fallback = fallback

    def app_for(self, path: str) -> ASGIApp:
        for prefix, app in self.routes:
            if path == prefix or path.startswith(prefix + "/"):
                return app
        return self.fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # each service's own server runs its lifespan
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await self.app_for(scope.get("path", "/"))(scope, receive, send)
