"""Alerts: an in-app notification and an email to the tenant's alert contacts, once per request.

Handling a request writes, in one transaction, its dedup row (request id = event id), the in-app
notification and the outbound email; the email sender (`email_sender.py`) delivers pending
emails with retries, so an SMTP outage neither blocks the consumer nor loses mail.
"""

from __future__ import annotations

import logging

from notification.domain.alerts import AlertRequest, Channel
from notification.service_layer.ports import (
    AlertRenderer,
    Clock,
    NewEmail,
    NotificationRecord,
    NotificationStore,
    SubscriptionRecord,
)
from servicekit.data.ids import new_id
from servicekit.data.timestamps import format_utc

log = logging.getLogger(__name__)

ENDPOINT_DISABLED_TEMPLATE = "endpoint_disabled"


class AlertService:
    def __init__(self, store: NotificationStore, renderer: AlertRenderer, clock: Clock) -> None:
        self.store = store
        self.renderer = renderer
        self.clock = clock

    async def handle(self, request: AlertRequest) -> bool:
        """Record the request's alerts; False when it was handled before (dedup by id)."""
        rendered = self.renderer.render(request.template, request.data)
        now = self.clock()
        notification = None
        if Channel.IN_APP in request.channels:
            notification = NotificationRecord(
                id=new_id("ntf", at=now),
                tenant_id=request.tenant_id,
                template=request.template,
                title=rendered.title,
                body=rendered.text,
                data=dict(request.data),
                created_at=now,
                read_at=None,
            )
        email = None
        if Channel.EMAIL in request.channels:
            recipients = await self.store.get_alert_contacts(request.tenant_id)
            if recipients:
                email = NewEmail(
                    id=new_id("eml", at=now),
                    recipients=recipients,
                    subject=rendered.subject,
                    text_body=rendered.text,
                    html_body=rendered.html,
                )
            else:
                log.info("no alert contacts; email skipped", extra={"tenant": request.tenant_id})
        recorded = await self.store.record_alert(
            request.id, request.tenant_id, request.template, notification, email, now
        )
        if recorded:
            # One line per alert (not per redelivered request): who, what, where it went; the
            # addresses and the rendered text stay out of the log.
            log.info(
                "alert %s",
                request.template,
                extra={
                    "tenant": request.tenant_id,
                    "schedule_id": request.data.get("schedule_id"),
                    "in_app": notification is not None,
                    "emails": 0 if email is None else len(email.recipients),
                },
            )
        return recorded

    async def endpoint_disabled(self, sub: SubscriptionRecord) -> None:
        now = self.clock()
        request = AlertRequest(
            id=f"endpoint_disabled:{sub.id}:{now.isoformat()}",
            tenant_id=sub.tenant_id,
            channels=frozenset({Channel.EMAIL, Channel.IN_APP}),
            template=ENDPOINT_DISABLED_TEMPLATE,
            data={
                "subscription_id": sub.id,
                "url": sub.url,
                "description": sub.description,
                "failing_since": format_utc(sub.failing_since) if sub.failing_since else None,
            },
        )
        await self.handle(request)
