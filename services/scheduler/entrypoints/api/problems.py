"""RFC 9457 problem+json for every error the API returns, FastAPI's own 404/405/422 included.

Service-layer errors are mapped here, at the edge; they know nothing of HTTP. The response body is
servicekit's (the shape notification answers with); the mappings are the scheduler's. A 500 never
carries internal detail (it could hold a secret or a SQL fragment); it is logged with the request
path.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from scheduler.service_layer.apply import MAX_APPLY_SCHEDULES
from scheduler.service_layer.errors import (
    DuplicateKey,
    IdempotencyConflict,
    InvalidInput,
    InvalidItems,
    KeyConflict,
    NotAWebhook,
    NotFound,
    QuotaExceeded,
    ScheduleIsCompleted,
    TenantSuspended,
    VersionMismatch,
)
from servicekit.data.pagination import InvalidCursor, invalid_cursor_problem
from servicekit.http.problems import (
    TYPE_PREFIX,
    field_errors_problem,
    problem_response,
    render,
)
from servicekit.http.problems import install_problem_handlers as install_shared_handlers

PROBLEM_TYPE_BASE = TYPE_PREFIX
# A bulk request's 422 names every item that is wrong (one entry per definition in the usual
# case), so its answer stays about the size of the request.
MAX_ITEM_ERRORS = MAX_APPLY_SCHEDULES
log = logging.getLogger("scheduler.api")


def problem(
    request: Request,
    status: int,
    detail: str | None,
    *,
    slug: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """servicekit's problem+json, typed by `slug` or, without one, by the status; `instance` is
    the request's path."""
    return problem_response(
        status,
        slug=slug,
        detail=detail,
        instance=request.url.path,
        extra=extra,
        headers=headers,
    )


async def _service(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, NotFound):
        return problem(request, 404, str(exc))
    if isinstance(exc, InvalidInput):
        return render(request, field_errors_problem([(exc.field, exc.reason)]))
    if isinstance(exc, VersionMismatch):
        return problem(request, 412, str(exc))
    if isinstance(exc, IdempotencyConflict):
        return problem(request, 409, str(exc), slug="idempotency-conflict")
    if isinstance(exc, TenantSuspended):
        return problem(request, 403, str(exc), slug="tenant-suspended")
    if isinstance(exc, InvalidItems):
        return render(request, field_errors_problem(exc.errors, limit=MAX_ITEM_ERRORS))
    if isinstance(exc, QuotaExceeded):
        # 403: the request is well-formed but the tenant's plan does not allow it.
        where: dict[str, Any] = {} if exc.field is None else {"field": exc.field}
        return problem(
            request,
            403,
            str(exc),
            slug="quota-exceeded",
            **where,
            limit=exc.limit,
            limit_value=exc.limit_value,
            current=exc.current,
        )
    if isinstance(exc, KeyConflict):
        return problem(request, 409, str(exc), slug="key-conflict")
    if isinstance(exc, DuplicateKey):
        return problem(request, 409, "a concurrent request created the same resource; retry")
    if isinstance(exc, NotAWebhook):
        return problem(request, 409, str(exc), slug="not-a-webhook")
    if isinstance(exc, ScheduleIsCompleted):
        return problem(request, 409, str(exc), slug="schedule-completed")
    return await _unexpected(request, exc)


async def _cursor(request: Request, exc: Exception) -> JSONResponse:
    return render(request, invalid_cursor_problem())  # as notification answers it


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s: %s", request.method, request.url.path, type(exc).__name__)
    return problem(request, 500, "internal error; the request was not completed")


def install_problem_handlers(app: FastAPI) -> None:
    from scheduler.service_layer.errors import ServiceError

    install_shared_handlers(app)  # validation, ProblemError, HTTP errors: as notification's
    app.add_exception_handler(ServiceError, _service)
    app.add_exception_handler(InvalidCursor, _cursor)
    app.add_exception_handler(Exception, _unexpected)
