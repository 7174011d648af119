"""Both services' FastAPI app with interactive docs that need no network beyond the service.

FastAPI's `/docs` and `/redoc` load Swagger UI and ReDoc from a CDN; `fastapi-offline` ships the
same assets and serves them under `/static-offline-docs`. Swagger UI would still fetch a validity
badge from validator.swagger.io for a non-local host, so the validator is switched off.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

SWAGGER_UI_PARAMETERS: dict[str, Any] = {"validatorUrl": None}


def offline_docs_app(**kwargs: Any) -> FastAPI:
    """`FastAPI(**kwargs)` with `/docs` and `/redoc` served from packaged assets."""
    return FastAPIOffline(swagger_ui_parameters=SWAGGER_UI_PARAMETERS, **kwargs)
