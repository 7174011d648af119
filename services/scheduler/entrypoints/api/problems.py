"""RFC 9457 problem+json for every error the API returns, FastAPI's own 404/405/422 included.

Service-layer errors are mapped here, at the edge; they know nothing of HTTP. The response body is
servicekit's (the shape notification answers with); the mappings are the scheduler's. A 500 never
carries internal detail (it could hold a secret or a SQL fragment); it is logged with the request
path.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from scheduler.service_layer.errors import (
    DuplicateKey,
    IdempotencyConflict,
    InvalidInput,
    NotFound,
    QuotaExceeded,
    TenantSuspended,
    VersionMismatch,
)
from servicekit.problems import TYPE_PREFIX, problem_response

PROBLEM_TYPE_BASE = TYPE_PREFIX
log = logging.getLogger("scheduler.api")

_SLUG_BY_STATUS = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    409: "conflict",
    411: "length-required",
    412: "precondition-failed",
    413: "payload-too-large",
    415: "unsupported-media-type",
    422: "validation-error",
    428: "precondition-required",
    500: "internal-error",
}


def problem(
    status: int,
    detail: str | None,
    *,
    slug: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """servicekit's problem+json, typed by `slug` or, without one, by the status."""
    return problem_response(
        status,
        slug=slug or _SLUG_BY_STATUS.get(status, "error"),
        detail=detail,
        extra=extra,
        headers=headers,
    )


def _field_of(loc: tuple[Any, ...] | list[Any]) -> str:
    """("body", "target", "url") -> "target.url"; ("query", "limit") -> "limit"."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def _clean_message(msg: str) -> str:
    return msg.removeprefix("Value error, ")


async def _validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"field": _field_of(e.get("loc", ())), "message": _clean_message(str(e.get("msg", "")))}
        for e in exc.errors()[:20]  # bounded: a hostile body could produce thousands
    ]
    first = errors[0] if errors else {"field": "body", "message": "invalid request"}
    return problem(
        422,
        f"{first['field']}: {first['message']}",
        field=first["field"],
        errors=errors,
    )


async def _http(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers) if exc.headers else None
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    return problem(exc.status_code, detail, headers=headers)


async def _service(_request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, NotFound):
        return problem(404, str(exc))
    if isinstance(exc, InvalidInput):
        return problem(
            422,
            exc.reason if exc.reason.startswith(exc.field) else f"{exc.field}: {exc.reason}",
            field=exc.field,
            errors=[{"field": exc.field, "message": exc.reason}],
        )
    if isinstance(exc, VersionMismatch):
        return problem(412, str(exc))
    if isinstance(exc, IdempotencyConflict):
        return problem(409, str(exc), slug="idempotency-conflict")
    if isinstance(exc, TenantSuspended):
        return problem(403, str(exc), slug="tenant-suspended")
    if isinstance(exc, QuotaExceeded):
        # 403: the request is well-formed but the tenant's plan does not allow it.
        return problem(
            403,
            str(exc),
            slug="quota-exceeded",
            limit=exc.limit,
            limit_value=exc.limit_value,
            current=exc.current,
        )
    if isinstance(exc, DuplicateKey):
        return problem(409, "a concurrent request created the same resource; retry")
    return await _unexpected(_request, exc)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s: %s", request.method, request.url.path, type(exc).__name__)
    return problem(500, "internal error; the request was not completed")


def install_problem_handlers(app: FastAPI) -> None:
    from scheduler.service_layer.errors import ServiceError

    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(ServiceError, _service)
    app.add_exception_handler(Exception, _unexpected)
