"""RFC 9457 problem details (`application/problem+json`): the one error shape of both services.

Every problem's `type` is `TYPE_PREFIX` + a slug (`…/validation-error`, `…/not-found`, …; a
status without a slug of its own gets `SLUG_BY_STATUS`'s). A validation problem (422) names every
offending field in `errors: [{"field", "detail"}]` (RFC 9457 §3's `errors` extension) and the
first one again in `field`:

    {"type": "…/validation-error", "title": "Request validation failed", "status": 422,
     "detail": "target.url: Field required", "field": "target.url",
     "errors": [{"field": "target.url", "detail": "Field required"}], "instance": "/v1/…"}

`field` is the path inside the body, dotted, with list indices in brackets (`target.url`,
`schedules[3].cron`), or the query/path/header parameter's name. At most `MAX_FIELD_ERRORS` are
listed; a bulk route raises its own bound with `@field_error_limit(n)` on its endpoint. Every
problem of both services carries `instance`, the request's path without its query
(`instance_of`): the app's handlers, authclient's 401/403, and the 413/503 that middleware sends.
`install_problem_handlers` renders Starlette's `HTTPException` (a 405 lists in `Allow` every method
of the matched path) and FastAPI's `RequestValidationError`, which it splits three ways: a body
that is not JSON is 400 `…/invalid-json` naming line and column; a body sent without a JSON
`Content-Type` is 415 naming `application/json`; anything else is the 422 above.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from re import Pattern
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.datastructures import URL
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, compile_path
from starlette.types import Scope

PROBLEM_MEDIA_TYPE = "application/problem+json"
JSON_MEDIA_TYPE = "application/json"
# authclient.fastapi uses this base too: auth refusals and service errors share one namespace.
TYPE_PREFIX = "https://scheduler-platform.dev/problems/"
VALIDATION_TITLE = "Request validation failed"
# A hostile body can produce thousands of errors; the first ones say what to fix.
MAX_FIELD_ERRORS = 20

SLUG_BY_STATUS = {
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
    503: "unavailable",
}


def instance_of(scope: Scope) -> str:
    """RFC 9457 `instance` of a request: its path, never its query (a query may carry a token)."""
    return URL(scope=scope).path


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
    """A problem+json response; without a slug the type is the status's (`SLUG_BY_STATUS`)."""
    body: dict[str, Any] = {
        "type": TYPE_PREFIX + (slug or SLUG_BY_STATUS.get(status, "error")),
        "title": title or _reason(status),
        "status": status,
    }
    if detail is not None:
        body["detail"] = detail
    if instance is not None:
        body["instance"] = instance
    body.update(extra or {})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)


def field_errors_problem(
    errors: Sequence[tuple[str, str]], *, limit: int = MAX_FIELD_ERRORS
) -> ProblemError:
    """The 422 validation problem for `(field, detail)` pairs, in the shape the module doc shows;
    service layers that check a rule the schema cannot express raise (or map to) this. At most
    `limit` pairs are listed."""
    listed = [{"field": f, "detail": _without_field(f, d)} for f, d in errors[:limit]] or [
        {"field": "body", "detail": "invalid request"}
    ]
    first = listed[0]
    return ProblemError(
        422,
        "validation-error",
        f"{first['field']}: {first['detail']}",
        title=VALIDATION_TITLE,
        extra={"field": first["field"], "errors": listed},
    )


def _without_field(field: str, detail: str) -> str:
    """`detail` without a leading `field: ` (a message raised as "timezone: unknown ..." and
    then paired with its field): the problem names the field once, in `field` and in `detail`'s
    prefix, never "timezone: timezone: ..."."""
    while field and detail.startswith(f"{field}: "):
        detail = detail[len(field) + 2 :]
    return detail


def field_name(loc: Sequence[Any]) -> str:
    """("body", "target", "url") -> "target.url"; ("body", "schedules", 3, "cron") ->
    "schedules[3].cron"; ("query", "limit") -> "limit"."""
    parts = list(loc)
    if parts and parts[0] in {"body", "query", "path", "header", "cookie"}:
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


_FIELD_ERROR_LIMIT = "servicekit_field_error_limit"
_E = TypeVar("_E", bound=Callable[..., Any])


def field_error_limit(limit: int) -> Callable[[_E], _E]:
    """Mark an endpoint whose 422 lists up to `limit` field errors instead of MAX_FIELD_ERRORS
    (a bulk route, whose answer must name every item that is wrong)."""

    def mark(endpoint: _E) -> _E:
        setattr(endpoint, _FIELD_ERROR_LIMIT, limit)
        return endpoint

    return mark


def route_field_error_limit(request: Request) -> int:
    """The matched endpoint's `field_error_limit`, else MAX_FIELD_ERRORS."""
    route = request.scope.get("route")
    endpoint = getattr(route, "endpoint", None)
    limit = getattr(endpoint, _FIELD_ERROR_LIMIT, MAX_FIELD_ERRORS)
    return limit if isinstance(limit, int) else MAX_FIELD_ERRORS


def _clean(message: str) -> str:
    return message.removeprefix("Value error, ")


def _line_column(document: Any, position: int) -> tuple[int, int]:
    text = document.decode("utf-8", "replace") if isinstance(document, bytes) else str(document)
    before = text[:position]
    line = before.count("\n") + 1
    return line, position - (before.rfind("\n") + 1) + 1


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == JSON_MEDIA_TYPE or (
        media.startswith("application/") and media.endswith("+json")
    )


def _invalid_json(request: Request, error: Mapping[str, Any], document: Any) -> JSONResponse:
    loc = error.get("loc", ())
    position = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else 0
    line, column = _line_column(document, position)
    reason = str((error.get("ctx") or {}).get("error", "invalid JSON"))
    return problem_response(
        400,
        slug="invalid-json",
        title="Malformed JSON body",
        detail=f"the body is not valid JSON: {reason} at line {line}, column {column}",
        instance=request.url.path,
        extra={"line": line, "column": column},
    )


def validation_response(request: Request, exc: RequestValidationError) -> JSONResponse:
    """A RequestValidationError as 400 invalid-json, 415 or 422 (see the module doc)."""
    errors = list(exc.errors())
    for error in errors:
        if error.get("type") == "json_invalid":
            return _invalid_json(request, error, exc.body)
    body_sent = isinstance(exc.body, bytes | bytearray) and len(exc.body) > 0
    if body_sent and not _is_json(request.headers.get("content-type")):
        # FastAPI hands a non-JSON body to the model as raw bytes; say what to send instead.
        return problem_response(
            415,
            title="Unsupported Media Type",
            detail=f"send the body as JSON with Content-Type: {JSON_MEDIA_TYPE}",
            instance=request.url.path,
            headers={"Accept": JSON_MEDIA_TYPE},
        )
    problem = field_errors_problem(
        [(field_name(e.get("loc", ())), _clean(str(e.get("msg", "invalid")))) for e in errors],
        limit=route_field_error_limit(request),
    )
    return render(request, problem)


def render(request: Request, exc: ProblemError) -> JSONResponse:
    return problem_response(
        exc.status,
        slug=exc.slug,
        title=exc.title,
        detail=exc.detail,
        instance=request.url.path,
        extra=exc.extra,
        headers=exc.headers,
    )


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _documented_paths(app: FastAPI) -> list[tuple[Pattern[str], int, set[str]]]:
    """(regex, parameter count, methods) per path of the app's OpenAPI document, cached."""
    cached: list[tuple[Pattern[str], int, set[str]]] | None = getattr(
        app.state, "servicekit_documented_paths", None
    )
    if cached is None:
        cached = [
            (compile_path(path)[0], path.count("{"), {m.upper() for m in operations})
            for path, operations in app.openapi().get("paths", {}).items()
        ]
        app.state.servicekit_documented_paths = cached
    return cached


def allowed_methods(request: Request) -> list[str]:
    """The methods of the resource this request's path names (for a 405's Allow).

    Starlette's own 405 names only the first partially matching route's methods. The OpenAPI
    document's paths are the resources; when templates overlap (`/v1/schedules/preview` and
    `/v1/schedules/{schedule_id}`), the one with the fewest parameters is the one named.
    Undocumented routes (health, docs) are probed through the routes' `matches`."""
    path = request.url.path
    found = [
        (params, methods)
        for regex, params, methods in _documented_paths(request.app)
        if regex.match(path)
    ]
    if found:
        return sorted(min(found, key=lambda f: f[0])[1])
    allowed = []
    for method in _METHODS:
        probe = {**request.scope, "method": method}
        if any(route.matches(probe)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return allowed


def http_exception_response(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    headers = dict(exc.headers or {})
    detail = exc.detail if isinstance(exc.detail, str) else _reason(exc.status_code)
    if exc.status_code == 405:
        allowed = allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        detail = f"{request.method} is not allowed here; allowed: {', '.join(allowed)}"
    return problem_response(
        exc.status_code, detail=detail, instance=request.url.path, headers=headers or None
    )


async def _problem_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return render(request, exc)


async def _http_exception_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return http_exception_response(request, exc)


async def _validation_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_response(request, exc)


def install_problem_handlers(app: FastAPI) -> None:
    """Render every HTTP error of `app` as problem+json."""
    app.add_exception_handler(ProblemError, _problem_error_handler)
    app.add_exception_handler(StarletteHTTPException, _http_exception_handler)
    app.add_exception_handler(RequestValidationError, _validation_handler)


def not_found(what: str, ident: str) -> ProblemError:
    """The same answer whether the resource is missing or another tenant's (no existence leak)."""
    return ProblemError(404, "not-found", f"{what} {ident[:100]!r} not found")


class Problem(BaseModel):
    """RFC 9457 problem details; validation problems add `field` and `errors`, others their own
    extension members."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None


_PROBLEM_CONTENT = {PROBLEM_MEDIA_TYPE: {"schema": Problem.model_json_schema()}}
_DESCRIPTIONS = {
    400: "Bad Request: malformed JSON body (`…/invalid-json`) or an invalid cursor",
    413: "Content Too Large: the body exceeds the request limit",
    415: "Unsupported Media Type: send the body with Content-Type: application/json",
    422: "Validation failed: `field` and `errors` name what to fix",
    503: "Service Unavailable: the database is not answering; retry after `Retry-After`",
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for error statuses: the Problem schema under `application/problem+json`,
    the media type every error is sent with (FastAPI's `model=` files it under application/json)."""
    return {
        s: {"description": _DESCRIPTIONS.get(s, _reason(s)), "content": _PROBLEM_CONTENT}
        for s in statuses
    }
