"""What `Client` and `AsyncClient` share: configuration, building a request from an operation's
arguments, reading the answer (a model's input, or an `ApiError`), and the retry decision."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any, TypeGuard
from urllib.parse import quote

import httpx
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from schedulerclient._operation import Operation
from schedulerclient._retry import (
    RetryPolicy,
    may_retry_exception,
    may_retry_status,
    retry_after_seconds,
)
from schedulerclient._unset import Unset
from schedulerclient._version import __version__
from schedulerclient.errors import MAX_DETAIL_CHARS, ApiError, TransportError

log = logging.getLogger("schedulerclient")

DEFAULT_BASE_URL = "http://127.0.0.1:8089"
# `make run` serves notification on its own port; a gateway serves both APIs on one origin.
DEFAULT_NOTIFICATION_URL = "http://127.0.0.1:8088"
DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_PAGES = 1000
USER_AGENT = f"schedulerclient/{__version__}"

Attempt = httpx.Response | httpx.TransportError


class Core:
    """Settings and the pure parts of a call; subclasses add the transport and the loop."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        notification_url: str | None,
        policy: RetryPolicy,
    ) -> None:
        if notification_url is None:
            same = base_url.rstrip("/") != DEFAULT_BASE_URL
            notification_url = base_url if same else DEFAULT_NOTIFICATION_URL
        self.base_url = base_url.rstrip("/")
        self.notification_url = notification_url.rstrip("/")
        self._token = token
        self._policy = policy

    @staticmethod
    def env_arguments(environ: Mapping[str, str] | None) -> dict[str, Any]:
        """`SCHEDULER_URL`, `SCHEDULER_TOKEN`, `NOTIFICATION_URL` as constructor arguments."""
        env = os.environ if environ is None else environ
        found = {
            "base_url": env.get("SCHEDULER_URL"),
            "token": env.get("SCHEDULER_TOKEN"),
            "notification_url": env.get("NOTIFICATION_URL"),
        }
        return {name: value for name, value in found.items() if value}

    def __repr__(self) -> str:  # never the token
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, "
            f"notification_url={self.notification_url!r})"
        )

    def _build(
        self,
        http: httpx.Client | httpx.AsyncClient,
        op: Operation,
        path: Mapping[str, object] | None,
        query: Mapping[str, object] | None,
        headers: Mapping[str, object] | None,
        body: object,
    ) -> httpx.Request:
        root = self.base_url if op.service == "scheduler" else self.notification_url
        url = root + op.path.format_map(
            {name: quote(_text(value), safe="") for name, value in (path or {}).items()}
        )
        sent = {"Accept": "application/json", "User-Agent": USER_AGENT}
        sent.update({k: _text(v) for k, v in (headers or {}).items() if _given(v)})
        if op.idempotency_header and op.idempotency_header not in sent:
            # One key for every attempt of this call: a repeat replays, it does not create twice.
            sent[op.idempotency_header] = str(uuid.uuid4())
        if self._token:
            sent["Authorization"] = f"Bearer {self._token}"
        params: list[tuple[str, str | int | float | bool | None]] = [
            (name, _text(item))
            for name, value in (query or {}).items()
            if _given(value)
            for item in (value if _is_many(value) else [value])
        ]
        json = None if isinstance(body, Unset) else jsonable(body)
        return http.build_request(op.method, url, params=params, headers=sent, json=json)

    def _retry_delay(
        self, op: Operation, attempt: Attempt, retries: int, waited: float
    ) -> float | None:
        """Seconds to wait before repeating, or None: this attempt is the outcome."""
        if isinstance(attempt, httpx.TransportError):
            if not may_retry_exception(attempt, op.retryable):
                return None
            delay = self._policy.delay(retries, waited, None)
        else:
            if not may_retry_status(attempt.status_code, op.retryable):
                return None
            after = retry_after_seconds(attempt.headers.get("Retry-After"))
            delay = self._policy.delay(retries, waited, after)
        if delay is not None:
            log.debug("retrying %s in %.1f s (%s)", op.id, delay, _describe(attempt))
        return delay

    @staticmethod
    def _outcome(op: Operation, request: httpx.Request, attempt: Attempt) -> Any:
        """The answer's JSON (None for an empty one), or the error it stands for."""
        if isinstance(attempt, httpx.TransportError):
            reason = str(attempt) or type(attempt).__name__
            where = request.url.copy_with(query=None)
            raise TransportError(f"{op.method} {where}: {reason}") from attempt
        if attempt.is_success:
            return attempt.json() if attempt.content else None
        raise ApiError(
            attempt.status_code,
            _problem(attempt),
            method=op.method,
            url=str(request.url.copy_with(query=None)),
            retry_after=retry_after_seconds(attempt.headers.get("Retry-After")),
        )


def jsonable(value: object) -> Any:
    """A request body as JSON values: models as their set fields (by alias), `UNSET` dropped."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items() if not isinstance(v, Unset)}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return to_jsonable_python(value)


def merge_body(base: object, fields: Mapping[str, object], *, required: bool) -> object:
    """`base` (a model or mapping, or None) overlaid with the fields given as arguments."""
    given = {name: value for name, value in fields.items() if not isinstance(value, Unset)}
    if base is None and not given:
        return {} if required else Unset.UNSET
    merged = dict(jsonable(base) or {}) if base is not None else {}
    merged.update(given)
    return merged


def _is_many(value: object) -> TypeGuard[Sequence[object]]:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _given(value: object) -> bool:
    return value is not None and not isinstance(value, Unset)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        document = response.json()
    except ValueError:
        document = None
    if isinstance(document, dict):
        return document
    text = " ".join(response.text.split())[:MAX_DETAIL_CHARS]
    return {"title": response.reason_phrase, "detail": text or None, "status": response.status_code}


def _describe(attempt: Attempt) -> str:
    if isinstance(attempt, httpx.TransportError):
        return type(attempt).__name__
    return f"HTTP {attempt.status_code}"
