"""Alerts: an in-app notification and an email to the tenant's alert contacts, once per request.

Handling a request writes, in one transaction, its dedup row (request id = event id), the in-app
notification and the outbound email; a separate sender delivers pending emails with retries, so
an SMTP outage neither blocks the consumer nor loses mail.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import timedelta
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from notification.domain.alerts import AlertRequest, Channel
from notification.service_layer.ports import (
    AlertRenderer,
    Clock,
    EmailRecord,
    Mailer,
    NewEmail,
    NotificationRecord,
    NotificationStore,
    SubscriptionRecord,
)

log = logging.getLogger(__name__)

ENDPOINT_DISABLED_TEMPLATE = "endpoint_disabled"
# Email retry waits (seconds) after attempt 1, 2, ...; the last one repeats until max attempts.
EMAIL_RETRY_SECONDS = (30, 120, 600, 1800, 3600)


class AlertService:
    def __init__(
        self,
        store: NotificationStore,
        renderer: AlertRenderer,
        clock: Clock,
        *,
        mail_from: str,
        email_max_attempts: int = 6,
    ) -> None:
        self.store = store
        self.renderer = renderer
        self.clock = clock
        self.mail_from = mail_from
        self.email_max_attempts = email_max_attempts

    async def handle(self, request: AlertRequest) -> bool:
        """Record the request's alerts; False when it was handled before (dedup by id)."""
        rendered = self.renderer.render(request.template, request.data)
        now = self.clock()
        notification = None
        if Channel.IN_APP in request.channels:
            notification = NotificationRecord(
                id=f"ntf_{uuid.uuid4().hex}",
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
                    id=f"eml_{uuid.uuid4().hex}",
                    recipients=recipients,
                    subject=rendered.subject,
                    text_body=rendered.text,
                    html_body=rendered.html,
                )
            else:
                log.info("no alert contacts; email skipped", extra={"tenant": request.tenant_id})
        return await self.store.record_alert(
            request.id, request.tenant_id, request.template, notification, email, now
        )

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
                "failing_since": sub.failing_since.isoformat() if sub.failing_since else None,
            },
        )
        await self.handle(request)

    def build_message(self, email: EmailRecord) -> EmailMessage:
        message = EmailMessage()
        message["From"] = self.mail_from
        message["To"] = ", ".join(email.recipients)
        message["Subject"] = email.subject
        message["Date"] = formatdate(self.clock().timestamp(), usegmt=True)
        # Stable per email row: a resend after a crash carries the same Message-ID.
        domain = self.mail_from.rpartition("@")[2] or "localhost"
        message["Message-ID"] = make_msgid(idstring=email.id, domain=domain)
        message.set_content(email.text_body)
        message.add_alternative(email.html_body, subtype="html")
        return message

    async def send_due_emails(self, mailer: Mailer, limit: int = 50) -> int:
        emails: Sequence[EmailRecord] = await self.store.claim_due_emails(
            self.clock(), limit, lease_seconds=300
        )
        for email in emails:
            try:
                await mailer.send(self.build_message(email))
            except Exception as exc:  # any SMTP/OS failure: retry later, never crash the loop
                attempts = email.attempt_count + 1
                next_at = None
                if attempts < self.email_max_attempts:
                    wait = EMAIL_RETRY_SECONDS[min(attempts, len(EMAIL_RETRY_SECONDS)) - 1]
                    next_at = self.clock() + timedelta(seconds=wait)
                log.warning("email send failed", extra={"email": email.id, "error": str(exc)})
                await self.store.complete_email(
                    email.id,
                    sent=False,
                    error=f"{type(exc).__name__}: {exc}"[:500],
                    next_attempt_at=next_at,
                    now=self.clock(),
                )
            else:
                await self.store.complete_email(
                    email.id, sent=True, error=None, next_attempt_at=None, now=self.clock()
                )
        return len(emails)
