"""Errors raised by the event bus. Callers catch these, never a driver's own exceptions."""

from __future__ import annotations


class BusError(Exception):
    """Root of every event-bus error."""


class PublishError(BusError):
    """Not every message of a batch was acknowledged; the caller must publish the batch again.

    Some messages of the batch may have been written: delivery is at-least-once, and consumers
    deduplicate by event id.
    """


class ConsumeError(BusError):
    """The consumer could not join, fetch or commit; the caller may retry after a pause."""


class EnvelopeError(ValueError):
    """A value is not a well-formed event envelope (too large, not JSON, missing fields)."""
