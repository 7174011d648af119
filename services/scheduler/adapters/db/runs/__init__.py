"""The SQL runs repository, split by role (see repository.py)."""

from scheduler.adapters.db.runs.repository import SqlRunRepository

__all__ = ["SqlRunRepository"]
