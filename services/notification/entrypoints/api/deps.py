"""Dependencies shared by the routers: the wired container and list parameters."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request

from notification.bootstrap import Container
from servicekit.data.pagination import LIMIT_MAX, LIMIT_MIN, Cursor, decode_cursor
from servicekit.http.problems import problem_responses
from servicekit.text import NO_CONTROL_CHARS


def container(request: Request) -> Container:
    found: Container = request.app.state.container
    return found


Limit = Annotated[int, Query(ge=LIMIT_MIN, le=LIMIT_MAX)]
# A path id that holds a control character cannot exist: 422 naming the parameter.
IdPath = Annotated[str, Path(min_length=1, max_length=64), NO_CONTROL_CHARS]

# OpenAPI: every route's problems, and those of the routes that take a JSON body / a cursor.
ROUTE_ERRORS = problem_responses(401, 403, 404, 422, 503)
BODY_ERRORS = problem_responses(400, 413, 415)
LIST_ERRORS = problem_responses(400)


def cursor_param(
    cursor: Annotated[str, Query(max_length=512), NO_CONTROL_CHARS] | None = None,
) -> Cursor | None:
    return decode_cursor(cursor) if cursor is not None else None
