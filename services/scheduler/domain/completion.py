"""Completion callbacks (DESIGN.md §7b "Completion"): the per-attempt token's digest and the
tenant alert of a run that completed too fast. Pure: the token arrives from the caller (the
service layer draws it); only its SHA-256 is stored, and a presented token is compared with it
in constant time."""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime

from scheduler.domain.alerts import TEMPLATE_RUN_TOO_FAST, alert_request
from scheduler.domain.events import DomainEvent
from scheduler.domain.run import Run
from servicekit.data.ids import stable_id
from servicekit.data.timestamps import format_utc

TOKEN_PREFIX = "rct_"
"""Run completion tokens start with it, so a leaked one is recognisable (secret scanners)."""
MAX_TOKEN_CHARS = 128
"""A presented token longer than this is refused without hashing it."""


def token_digest(token: str) -> str:
    """The stored form of a completion token: SHA-256, lowercase hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(run: Run, token: str) -> bool:
    """Whether `token` is the one issued for the run's current completion attempt."""
    stored = run.completion_token_hash
    if stored is None or not token or len(token) > MAX_TOKEN_CHARS:
        return False
    return hmac.compare_digest(stored, token_digest(token))


def too_fast_alert(
    run: Run,
    schedule_name: str,
    *,
    min_duration_seconds: int,
    duration_seconds: float,
    now: datetime,
) -> DomainEvent:
    """The alert request of a run that completed sooner than its schedule allows (email and
    in-app, like the breaker's); one per run."""
    return alert_request(
        id=stable_id("evt", run.id, "too_fast_alert"),
        tenant_id=run.tenant_id,
        schedule_id=run.schedule_id,
        template=TEMPLATE_RUN_TOO_FAST,
        data={
            "schedule_id": run.schedule_id,
            "schedule_name": schedule_name,
            "run_id": run.id,
            "run_path": f"/v1/schedules/{run.schedule_id}/runs/{run.id}",
            "scheduled_for": format_utc(run.scheduled_for),
            "min_duration_seconds": min_duration_seconds,
            "duration_seconds": round(duration_seconds, 3),
            "detail": run.completion_detail,
        },
        now=now,
    )
