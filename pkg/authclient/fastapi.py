"""FastAPI glue: `install(app, verifier)` once, then `require(scope)` on each route.

Usage (either form; the dependency resolves to the caller's Principal)::

    @router.get("/v1/schedules/")
    async def list_schedules(principal: Principal = require("schedules:read")) -> ...

    async def create(principal: Annotated[Principal, require("schedules:write")]) -> ...

`Depends(require(...))` also works (the requirement is itself callable), but is not needed.

Refusals are `AuthHTTPException` (a `fastapi.HTTPException`): 401 with
`WWW-Authenticate: Bearer` (plus `error="invalid_token", error_description="..."` when a token was
presented) and 403 with `error="insufficient_scope"`. `install()` registers a handler for that
one exception class, which renders `application/problem+json`; since Starlette picks handlers by
the exception's class hierarchy, it wins over an app's own `HTTPException` handler whatever the
registration order. The rendered body adds `instance`, the request's path (never its query). An
app that prefers its own renderer can read `exc.problem` (the body without `instance`),
`exc.status_code` and `exc.headers`.
"""

from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, params
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from authclient.errors import AuthError
from authclient.principal import Principal
from authclient.verifier import TokenVerifier
from servicekit.http.problems import PROBLEM_MEDIA_TYPE, TYPE_PREFIX

# One problem-type namespace for auth refusals and the services' own errors.
PROBLEM_TYPE_BASE = TYPE_PREFIX
_STATE_VERIFIER = "authclient_verifier"
_STATE_PROBLEM_BASE = "authclient_problem_type_base"

# auto_error=False: a missing header must become our problem+json 401, not FastAPI's default.
# Declaring HTTPBearer also puts the bearer scheme into /openapi.json.
_bearer = HTTPBearer(auto_error=False, description="JWT with sub, tenant_id and scope claims")


class AuthHTTPException(HTTPException):
    """A 401 or 403 from `require()`, carrying its problem+json body in `problem`."""

    def __init__(
        self, status_code: int, *, problem: dict[str, Any], headers: dict[str, str]
    ) -> None:
        super().__init__(status_code=status_code, detail=problem["detail"], headers=headers)
        self.problem = problem


def install(
    app: FastAPI, verifier: TokenVerifier, *, problem_type_base: str = PROBLEM_TYPE_BASE
) -> None:
    """Store the verifier on `app.state` and render AuthHTTPException as problem+json."""
    setattr(app.state, _STATE_VERIFIER, verifier)
    setattr(app.state, _STATE_PROBLEM_BASE, problem_type_base)
    app.add_exception_handler(AuthHTTPException, _render)  # type: ignore[arg-type]


async def _render(request: Request, exc: AuthHTTPException) -> JSONResponse:
    # The refusal is raised inside a dependency, before any route code: the request's path
    # (never its query, which may carry a token) is added here, as RFC 9457 `instance`.
    return JSONResponse(
        {**exc.problem, "instance": request.url.path},
        status_code=exc.status_code,
        headers=exc.headers,
        media_type=PROBLEM_MEDIA_TYPE,
    )


class _ScopeRequirement(params.Depends):
    """A `Depends` that is also the dependency, so `Depends(require(x))` works as well."""

    async def __call__(
        self,
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
    ) -> Principal:
        assert self.dependency is not None
        principal: Principal = await self.dependency(request, credentials)
        return principal


def require(scope: str) -> Any:
    """A dependency yielding the verified Principal, refusing with 401/403 (see module doc).

    Typed `Any` (like `fastapi.Depends`) so that `principal: Principal = require(...)` type-checks;
    the value is a `fastapi.params.Depends`.
    """
    if not scope or any(ch.isspace() for ch in scope):
        raise ValueError("scope must be one non-empty word")

    async def authenticate(
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
    ) -> Principal:
        verifier = getattr(request.app.state, _STATE_VERIFIER, None)
        if not isinstance(verifier, TokenVerifier):
            raise RuntimeError("authclient.fastapi.install(app, verifier) was not called")
        base: str = getattr(request.app.state, _STATE_PROBLEM_BASE, PROBLEM_TYPE_BASE)
        if credentials is None or not credentials.credentials:
            raise _unauthorized(base, None)
        try:
            principal = await verifier.verify(credentials.credentials)
        except AuthError as exc:
            raise _unauthorized(base, exc) from None
        if not principal.has(scope):
            raise _forbidden(base, scope)
        request.state.principal = principal
        return principal

    return _ScopeRequirement(dependency=authenticate)


def _unauthorized(base: str, error: AuthError | None) -> AuthHTTPException:
    if error is None:
        # RFC 6750 §3.1: no error code when the request carried no credentials.
        challenge = "Bearer"
        detail = "a bearer token is required"
    else:
        challenge = f'Bearer error="{error.error}", error_description="{error.description}"'
        detail = error.description
    problem = {
        "type": base + "unauthorized",
        "title": "Unauthorized",
        "status": 401,
        "detail": detail,
    }
    return AuthHTTPException(401, problem=problem, headers={"WWW-Authenticate": challenge})


def _forbidden(base: str, scope: str) -> AuthHTTPException:
    problem = {
        "type": base + "forbidden",
        "title": "Forbidden",
        "status": 403,
        "detail": f"the token lacks the scope {scope}",
        "required_scope": scope,
    }
    challenge = f'Bearer error="insufficient_scope", scope="{scope}"'
    return AuthHTTPException(403, problem=problem, headers={"WWW-Authenticate": challenge})
