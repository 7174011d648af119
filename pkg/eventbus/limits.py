"""Bounds shared by every bus implementation, with their units and reasons."""

from __future__ import annotations

import math

# Kafka's default `message.max.bytes` is 1 MiB (1,048,588 with overhead); one limit for both buses
# keeps the embedded default from accepting an event a real broker would refuse.
MAX_MESSAGE_BYTES = 1_048_576

# A poll returns at most this many records: the caller holds them in memory until it commits.
MAX_POLL_RECORDS = 10_000

# A poll waits at most this long (seconds); longer waits hide a stuck loop from shutdown.
MAX_POLL_TIMEOUT_SECONDS = 300.0


def check_poll_arguments(max_records: int, timeout_seconds: float) -> None:
    """Refuse a poll whose batch or wait is unbounded or nonsensical."""
    if not 1 <= max_records <= MAX_POLL_RECORDS:
        raise ValueError(f"max_records must be 1..{MAX_POLL_RECORDS}, got {max_records}")
    if not (math.isfinite(timeout_seconds) and 0 <= timeout_seconds <= MAX_POLL_TIMEOUT_SECONDS):
        raise ValueError(
            f"timeout_seconds must be 0..{MAX_POLL_TIMEOUT_SECONDS}, got {timeout_seconds}"
        )
