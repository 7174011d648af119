"""HTTP API of the scheduler (DESIGN.md §5)."""

from scheduler.entrypoints.api.app import create_app
from scheduler.entrypoints.api.context import ApiContext

__all__ = ["ApiContext", "create_app"]
