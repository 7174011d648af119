"""/v1/notifications/: the tenant's in-app inbox, newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from authclient import Principal
from authclient.fastapi import require
from notification.bootstrap import Container
from notification.entrypoints.api.deps import (
    LIST_ERRORS,
    ROUTE_ERRORS,
    IdPath,
    Limit,
    container,
    cursor_param,
)
from notification.entrypoints.api.schemas import NotificationOut, Page
from servicekit.data.pagination import LIMIT_DEFAULT, Cursor, split_page
from servicekit.http.problems import not_found

router = APIRouter(prefix="/v1/notifications", tags=["notifications"], responses=ROUTE_ERRORS)
Box = Annotated[Container, Depends(container)]


@router.get(
    "/",
    operation_id="listNotifications",
    response_model=Page[NotificationOut],
    responses=LIST_ERRORS,
)
async def list_notifications(
    principal: Annotated[Principal, require("notifications:read")],
    c: Box,
    after: Annotated[Cursor | None, Depends(cursor_param)],
    limit: Limit = LIMIT_DEFAULT,
    unread: bool = False,
) -> Page[NotificationOut]:
    rows = await c.store.list_notifications(principal.tenant_id, limit + 1, after, unread)
    page, next_cursor = split_page(rows, limit, key=lambda n: (n.created_at, n.id))
    return Page(items=[NotificationOut.of(n) for n in page], next_cursor=next_cursor)


@router.post(
    "/{notification_id}/read", operation_id="markNotificationRead", response_model=NotificationOut
)
async def mark_read(
    notification_id: IdPath,
    principal: Annotated[Principal, require("notifications:write")],
    c: Box,
) -> NotificationOut:
    record = await c.store.mark_notification_read(principal.tenant_id, notification_id, c.clock())
    if record is None:
        raise not_found("notification", notification_id)
    return NotificationOut.of(record)
