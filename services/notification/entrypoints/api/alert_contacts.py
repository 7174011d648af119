"""/v1/alert-contacts: the email addresses that receive a tenant's alerts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from authclient import Principal
from authclient.fastapi import require
from notification.bootstrap import Container
from notification.entrypoints.api.deps import BODY_ERRORS, ROUTE_ERRORS, container
from notification.entrypoints.api.schemas import AlertContactsIn, AlertContactsOut

router = APIRouter(prefix="/v1/alert-contacts", tags=["alert-contacts"], responses=ROUTE_ERRORS)
Box = Annotated[Container, Depends(container)]


@router.put(
    "", operation_id="putAlertContacts", response_model=AlertContactsOut, responses=BODY_ERRORS
)
async def put_alert_contacts(
    body: AlertContactsIn,
    principal: Annotated[Principal, require("notifications:write")],
    c: Box,
) -> AlertContactsOut:
    emails = list(dict.fromkeys(e.lower() for e in body.emails))  # dedup, keep order
    await c.store.put_alert_contacts(principal.tenant_id, emails, c.clock())
    return AlertContactsOut(emails=emails)


@router.get("", operation_id="getAlertContacts", response_model=AlertContactsOut)
async def get_alert_contacts(
    principal: Annotated[Principal, require("notifications:read")], c: Box
) -> AlertContactsOut:
    return AlertContactsOut(emails=await c.store.get_alert_contacts(principal.tenant_id))
