"""A database that is down or hung answers 503 problem+json with `Retry-After`, not 500.

The engine bounds every call (`servicekit.data.database`), so a request against a hung database
ends with one of these within its bounds: a refused or timed-out connect (`OSError`,
`TimeoutError`), a round trip past asyncpg's command timeout (`TimeoutError`), no free pooled
connection in time (`sqlalchemy.exc.TimeoutError`), a statement the server cancelled or a
connection that broke (`OperationalError`, `InterfaceError`, `DisconnectionError`, a bare
`DBAPIError`). `servicekit.runtime.transient.is_transient` is the one judge; any other database
error (a
constraint, bad data) stays the caller's 500. The same OSError or TimeoutError from another
dependency (a key fetch, a file) is a 503 too, but the answer names no database: only an error
that came through the database layer's frames is called a database outage
(`servicekit.runtime.transient.raised_by_database`).

The handlers sit in Starlette's exception middleware, so the error is answered and logged here
in one line (its class, never its message: a driver message can quote a bound value) instead
of propagating to the server's traceback.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc

from servicekit.http.problems import problem_response
from servicekit.runtime.transient import is_transient, raised_by_database

RETRY_AFTER_SECONDS = 5
log = logging.getLogger("servicekit.http.unavailable")

_OUTAGE_CLASSES: tuple[type[Exception], ...] = (
    OSError,  # includes TimeoutError and ConnectionRefusedError
    sa_exc.TimeoutError,
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.DBAPIError,  # a bare one (e.g. asyncpg's statement timeout); subclasses re-raised
)


def unavailable_response(
    what: str = "the database", *, instance: str | None = None
) -> JSONResponse:
    return problem_response(
        503,
        slug="unavailable",
        detail=f"{what} is unavailable; retry later",
        instance=instance,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    if not is_transient(exc):
        raise exc  # not an outage (an IntegrityError, ...): the app's 500 handler answers
    what = "the database" if raised_by_database(exc) else "a service this request needs"
    log.warning(
        "%s %s: %s unavailable (%s); answered 503",
        request.method,
        request.url.path,
        what,
        type(exc).__name__,
    )
    return unavailable_response(what, instance=request.url.path)


def install_unavailable_handlers(app: FastAPI) -> None:
    """Answer database outages on `app` with 503 problem+json and `Retry-After`."""
    for cls in _OUTAGE_CLASSES:
        app.add_exception_handler(cls, _unavailable)
