"""What the generated methods pass to the transport: one `Operation` per OpenAPI operation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from schedulerclient._retry import IDEMPOTENT_METHODS

Service = Literal["scheduler", "notification"]


@dataclass(frozen=True)
class Operation:
    id: str
    """The OpenAPI `operationId` (`createSchedule`)."""
    method: str
    path: str
    """The path template (`/v1/schedules/{schedule_id}`)."""
    service: Service
    """Which API serves it: `base_url` or `notification_url`."""
    idempotency_header: str | None = None
    """The header that makes a POST safe to repeat; the client fills it when not given."""

    @property
    def retryable(self) -> bool:
        return self.method in IDEMPOTENT_METHODS or self.idempotency_header is not None
