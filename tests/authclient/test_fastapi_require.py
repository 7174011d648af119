"""`require()` on a tiny FastAPI app, through httpx's ASGI transport: 401, 403, 200."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import httpx
import pytest
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from authclient import Principal, TokenVerifier
from authclient.fastapi import PROBLEM_TYPE_BASE, AuthHTTPException, install, require

from .conftest import HS_KEY, Clock, claims, hs_settings, sign


def build_app(clock: Clock) -> FastAPI:
    app = FastAPI()

    @app.get("/read")
    async def read(principal: Principal = require("schedules:read")) -> dict[str, str]:
        return {"tenant": principal.tenant_id, "subject": principal.subject}

    @app.get("/write")
    async def write(principal: Annotated[Principal, require("schedules:write")]) -> dict[str, str]:
        return {"tenant": principal.tenant_id}

    @app.get("/notify")
    async def notify(
        principal: Principal = Depends(require("notifications:read")),
    ) -> dict[str, str]:
        return {"tenant": principal.tenant_id}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    # The app's own generic handler, registered after install() would normally run: ours must
    # still win for auth refusals, and this one must still serve the app's other HTTP errors.
    @app.exception_handler(HTTPException)
    async def generic(_request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"generic": exc.detail}, status_code=exc.status_code)

    @app.get("/teapot")
    async def teapot() -> None:
        raise HTTPException(418, "short and stout")

    install(app, TokenVerifier(hs_settings(), clock=clock))
    return app


@pytest.fixture
async def client(clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(clock))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


def bearer(**overrides: object) -> dict[str, str]:
    return {"Authorization": f"Bearer {sign(claims(**overrides), HS_KEY, 'HS256')}"}


async def test_valid_token_with_scope_is_200(client: httpx.AsyncClient) -> None:
    response = await client.get("/read", headers=bearer(tenant_id="t-1", sub="alice"))
    assert response.status_code == 200
    assert response.json() == {"tenant": "t-1", "subject": "alice"}


@pytest.mark.parametrize("path", ["/read", "/write", "/notify"])
async def test_missing_token_is_401_without_error_code(
    client: httpx.AsyncClient, path: str
) -> None:
    response = await client.get(path)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "type": PROBLEM_TYPE_BASE + "unauthorized",
        "title": "Unauthorized",
        "status": 401,
        "detail": "a bearer token is required",
        "instance": path,
    }


@pytest.mark.parametrize(
    "authorization", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "token-without-scheme"]
)
async def test_non_bearer_credentials_count_as_missing(
    client: httpx.AsyncClient, authorization: str
) -> None:
    response = await client.get("/read", headers={"Authorization": authorization})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


async def test_invalid_token_is_401_with_invalid_token(client: httpx.AsyncClient) -> None:
    response = await client.get("/read", headers=bearer(exp=1_000_000_000))
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        'Bearer error="invalid_token", error_description="token has expired"'
    )
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["type"] == PROBLEM_TYPE_BASE + "unauthorized"
    assert body["detail"] == "token has expired"


async def test_token_without_tenant_is_401(client: httpx.AsyncClient) -> None:
    response = await client.get("/read", headers=bearer(tenant_id=None))
    assert response.status_code == 401
    assert "no tenant_id" in response.headers["www-authenticate"]


@pytest.mark.parametrize(
    ("path", "scope"), [("/write", "schedules:write"), ("/notify", "notifications:read")]
)
async def test_missing_scope_is_403_naming_it(
    client: httpx.AsyncClient, path: str, scope: str
) -> None:
    response = await client.get(path, headers=bearer(scope="schedules:read"))
    assert response.status_code == 403
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == (
        f'Bearer error="insufficient_scope", scope="{scope}"'
    )
    body = response.json()
    assert body["type"] == PROBLEM_TYPE_BASE + "forbidden"
    assert body["status"] == 403
    assert scope in body["detail"]
    assert body["required_scope"] == scope


async def test_each_form_of_require_grants_with_the_scope(client: httpx.AsyncClient) -> None:
    headers = bearer(scope="schedules:write notifications:read")
    assert (await client.get("/write", headers=headers)).status_code == 200
    assert (await client.get("/notify", headers=headers)).status_code == 200
    assert (await client.get("/read", headers=headers)).status_code == 403


async def test_app_handlers_still_serve_other_errors(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).status_code == 200
    response = await client.get("/teapot")
    assert response.status_code == 418
    assert response.json() == {"generic": "short and stout"}


async def test_openapi_declares_the_bearer_scheme(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert spec["paths"]["/read"]["get"]["security"] == [{"HTTPBearer": []}]
    assert "security" not in spec["paths"]["/healthz"]["get"]


async def test_exception_carries_what_a_generic_handler_needs() -> None:
    # An app that renders HTTPException itself gets status, headers and the problem body.
    app = FastAPI()

    @app.get("/x")
    async def x(principal: Principal = require("schedules:read")) -> str:
        return principal.subject

    seen: list[AuthHTTPException] = []
    install(app, TokenVerifier(hs_settings()))

    @app.exception_handler(AuthHTTPException)
    async def own(_request: Request, exc: AuthHTTPException) -> JSONResponse:
        seen.append(exc)
        return JSONResponse(exc.problem, status_code=exc.status_code, headers=exc.headers)

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/x")
    assert response.status_code == 401
    assert seen[0].problem["status"] == 401
    assert seen[0].headers == {"WWW-Authenticate": "Bearer"}


async def test_require_without_install_fails_loudly() -> None:
    app = FastAPI()

    @app.get("/x")
    async def x(principal: Principal = require("schedules:read")) -> str:
        return principal.subject

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        with pytest.raises(RuntimeError, match="install"):
            await client.get("/x", headers=bearer())


def test_require_refuses_a_malformed_scope() -> None:
    with pytest.raises(ValueError, match="one non-empty word"):
        require("schedules:read schedules:write")
