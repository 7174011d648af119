"""RFC 9457 problem details (`application/problem+json`) for FastAPI services.

`ProblemError` is raised by handlers for errors that carry their own `type`;
`install_problem_handlers` also turns Starlette's `HTTPException` and FastAPI's
`RequestValidationError` into problems, the latter naming every offending field
(`field`, and `invalid_params` as in RFC 9457 §3's example).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

PROBLEM_MEDIA_TYPE = "application/problem+json"
# authclient.fastapi uses this base too: auth refusals and service errors share one namespace.
TYPE_PREFIX = "https://scheduler-platform.dev/problems/"


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


class ProblemError(Exception):
    """An error the HTTP edge renders as problem+json; `slug` is appended to TYPE_PREFIX."""

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str,
        *,
        title: str | None = None,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.detail = detail
        self.title = title or _reason(status)
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})


def problem_response(
    status: int,
    *,
    slug: str | None = None,
    title: str | None = None,
    detail: str | None = None,
    instance: str | None = None,
    extra: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """A problem+json response; without a slug the type is `about:blank` (RFC 9457 §4.2.1)."""
    body: dict[str, Any] = {
        "type": f"{TYPE_PREFIX}{slug}" if slug else "about:blank",
        "title": title or _reason(status),
        "status": status,
    }
    if detail is not None:
        body["detail"] = detail
    if instance is not None:
        body["instance"] = instance
    body.update(extra or {})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)


def _field_name(loc: Sequence[Any]) -> str:
    # FastAPI prefixes the location ("body", "query", "path", "header"); keep the parameter path.
    parts = [str(p) for p in loc]
    if len(parts) > 1 and parts[0] in {"body", "query", "path", "header", "cookie"}:
        parts = parts[1:]
    return ".".join(parts) or "body"


def invalid_params(exc: RequestValidationError) -> list[dict[str, str]]:
    return [
        {"name": _field_name(err.get("loc", ())), "reason": str(err.get("msg", "invalid"))}
        for err in exc.errors()
    ]


async def _problem_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return problem_response(
        exc.status,
        slug=exc.slug,
        title=exc.title,
        detail=exc.detail,
        instance=request.url.path,
        extra=exc.extra,
        headers=exc.headers,
    )


async def _http_exception_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else None
    return problem_response(
        exc.status_code,
        detail=detail,
        instance=request.url.path,
        headers=exc.headers,
    )


async def _validation_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    params = invalid_params(exc)
    first = params[0] if params else {"name": "body", "reason": "invalid"}
    return problem_response(
        422,
        slug="validation-error",
        title="Request validation failed",
        detail=f"{first['name']}: {first['reason']}",
        instance=request.url.path,
        extra={"field": first["name"], "invalid_params": params},
    )


def install_problem_handlers(app: FastAPI) -> None:
    """Render every HTTP error of `app` as problem+json."""
    app.add_exception_handler(ProblemError, _problem_error_handler)
    app.add_exception_handler(StarletteHTTPException, _http_exception_handler)
    app.add_exception_handler(RequestValidationError, _validation_handler)


def not_found(what: str, ident: str) -> ProblemError:
    """The same answer whether the resource is missing or another tenant's (no existence leak)."""
    return ProblemError(404, "not-found", f"{what} {ident!r} not found")
