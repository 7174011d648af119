"""The client's errors, one tree:

    SchedulerClientError
    ├── ApiError          the API answered with a problem (4xx/5xx): status and problem fields
    ├── TransportError    no answer: connection refused, reset, timed out (after retries)
    └── PageLimitError    a page iterator followed more pages than its bound

Catch `SchedulerClientError` to report any failure in one line (`str(err)`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A body that is not a problem document is quoted this far, no further (it may be an HTML page).
MAX_DETAIL_CHARS = 500


class SchedulerClientError(Exception):
    """Any failure of a call made with `Client` or `AsyncClient`."""


class TransportError(SchedulerClientError):
    """The request got no HTTP answer (the cause is chained as `__cause__`)."""


class PageLimitError(SchedulerClientError):
    """A page iterator reached its `max_pages` bound before the last page."""


class ApiError(SchedulerClientError):
    """The API refused or failed the call; the RFC 9457 problem document's fields are attributes.

    `str(err)` is the problem's `detail` (or its title, or the status line), one line.
    """

    def __init__(
        self,
        status: int,
        problem: Mapping[str, Any] | None = None,
        *,
        method: str = "",
        url: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.problem: dict[str, Any] = dict(problem or {})
        self.method = method
        self.url = url
        self.retry_after = retry_after
        """Seconds the server asked to wait (`Retry-After`), when it said."""
        super().__init__(self._message())

    @property
    def type(self) -> str | None:
        return _text(self.problem.get("type"))

    @property
    def title(self) -> str | None:
        return _text(self.problem.get("title"))

    @property
    def detail(self) -> str | None:
        return _text(self.problem.get("detail"))

    @property
    def instance(self) -> str | None:
        return _text(self.problem.get("instance"))

    @property
    def field(self) -> str | None:
        """The first offending field of a validation problem (`target.url`, `cursor`)."""
        return _text(self.problem.get("field"))

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Every offending field of a validation problem: `[{"field", "detail"}, ...]`."""
        found = self.problem.get("errors")
        return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []

    @property
    def slug(self) -> str | None:
        """The last segment of `type` (`not-found`, `key-conflict`, `validation-error`)."""
        return self.type.rstrip("/").rsplit("/", 1)[-1] if self.type else None

    def _message(self) -> str:
        text = self.detail or self.title or f"HTTP {self.status}"
        return " ".join(text.split())[:MAX_DETAIL_CHARS]

    def __repr__(self) -> str:
        return f"ApiError(status={self.status}, type={self.type!r}, detail={self.detail!r})"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
