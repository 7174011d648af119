"""Dependencies shared by the routers: the wired container and list parameters."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request

from notification.bootstrap import Container
from servicekit.pagination import LIMIT_MAX, LIMIT_MIN, Cursor, decode_cursor


def container(request: Request) -> Container:
    found: Container = request.app.state.container
    return found


Limit = Annotated[int, Query(ge=LIMIT_MIN, le=LIMIT_MAX)]


def cursor_param(cursor: Annotated[str | None, Query(max_length=512)] = None) -> Cursor | None:
    return decode_cursor(cursor) if cursor is not None else None
