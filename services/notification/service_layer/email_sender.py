"""The email sender: lease due outbound emails, hand each to the mailer (SMTP, or an .eml file
under var/mail), and write what it led to: sent, pending again after the retry wait, or failed
once its attempts are spent.

The mechanism is the webhook dispatcher's, `servicekit.runtime.pipeline.LeasedPipeline`
(owner-token leases renewed while a send runs, a batched compare-and-set writer, graceful stop).
`EmailSender` owns that pipeline and hands it a store, `EmailLeases`, and its attempt:

- acquire: `EmailStore.acquire_due_emails`; every attempt is keyed by the mailer's server
  (`Mailer.server`). Every message goes to that one relay, which, not this service, talks to
  the recipients' domains: the relay is the resource a slow or throttling peer exhausts, so
  `per_key_limit` bounds the SMTP sessions open to it. Keying by recipient domain would let N
  domains open N times as many sessions to the same relay.
- the attempt: build the message (a stable Message-ID per email row, so a resend after a lost
  lease is recognisable) and send it; any exception is a failed attempt.
- write: `complete_emails` (a completion whose email is no longer leased to its owner is dropped
  and counted; the new holder's result stands).
- release at stop: `release_emails` (due again at once, no attempt counted).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import formatdate

from prometheus_client import Counter

from notification.domain.alerts import EmailStatus, email_retry_seconds
from notification.service_layer.ports import (
    Clock,
    EmailCompletion,
    EmailRecord,
    EmailStore,
    Mailer,
)
from servicekit.runtime.pipeline import (
    Lease,
    LeasedPipeline,
    PipelineSettings,
    Released,
    random_owner,
)
from webhookdeliver import bound_error_message

log = logging.getLogger(__name__)

EMAIL_ATTEMPTS = Counter("notification_email_attempts_total", "Email send attempts", ["outcome"])
EMAIL_COMPLETIONS_DROPPED = Counter(
    "notification_email_completions_dropped_total",
    "Finished email sends not written because their lease had been taken over",
)


@dataclass(frozen=True)
class EmailSettings(PipelineSettings):
    """The pipeline's settings with the email sender's defaults: a few SMTP sessions at once
    (alerts are few; relays limit sessions per client), a lease well above the SMTP timeout."""

    concurrency: int = 4
    per_key_limit: int = 4
    claim_batch: int = 50
    lease_seconds: float = 60.0
    idle_poll_seconds: float = 0.5
    max_attempts: int = 6


EmailWritten = EmailCompletion | Released
EmailLease = Lease[EmailRecord, EmailWritten]


def _count_dropped(written: int, dropped: int) -> None:
    if dropped:
        EMAIL_COMPLETIONS_DROPPED.inc(dropped)


class EmailLeases:
    """The outbound emails' `LeaseStore` (servicekit.runtime.pipeline)."""

    def __init__(self, store: EmailStore, mailer: Mailer, clock: Clock) -> None:
        self.store = store
        self.mailer = mailer
        self.clock = clock

    async def acquire(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[EmailLease]:
        emails = await self.store.acquire_due_emails(owner, now, lease_until, limit)
        server = self.mailer.server
        return [Lease.attempt(e.id, e, server) for e in emails]

    async def write(self, batch: Sequence[EmailWritten]) -> set[str]:
        """Write the releases, then the completions (compare-and-set on their leases). Returns
        the emails whose lease had been lost. Nothing may raise after the completions are
        written: the pipeline retries a batch whose write raised an outage."""
        now = self.clock()
        released = [(r.id, r.owner) for r in batch if isinstance(r, Released)]
        if released:
            await self.store.release_emails(released, now)
        done = [c for c in batch if isinstance(c, EmailCompletion)]
        if not done:
            return set()
        return {c.email_id for c in done} - await self.store.complete_emails(done, now)

    async def extend(self, leases: Sequence[tuple[str, str]], until: datetime) -> int:
        return await self.store.extend_email_leases(leases, until)

    def release(self, lease: EmailLease, owner: str, now: datetime) -> EmailWritten:
        return Released(lease.id, owner)

    async def next_due_at(self) -> datetime | None:
        return None  # not probed: the claim loop polls every `idle_poll_seconds`


class EmailSender:
    """The outbound emails' worker: owns the `LeasedPipeline` (`pipeline`: `run`, `stop`, and
    the step-by-step controls for tests), hands it its store, `EmailLeases` (`leases`), and
    `attempt`."""

    def __init__(
        self,
        store: EmailStore,
        mailer: Mailer,
        clock: Clock,
        *,
        mail_from: str,
        settings: EmailSettings | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.store = store
        self.mailer = mailer
        self.clock = clock
        self.mail_from = mail_from
        self.settings = settings or EmailSettings()
        self.worker_id = worker_id or f"eml_{uuid.uuid4().hex[:16]}"
        self.leases = EmailLeases(store, mailer, clock)
        self.pipeline: LeasedPipeline[EmailRecord, EmailWritten] = LeasedPipeline(
            self.leases,
            self.attempt,
            clock,
            settings=self.settings,
            new_owner=random_owner(self.worker_id),
            name="email sender",
            outage="database unavailable",
            logger=log,
            on_written=_count_dropped,
        )

    def build_message(self, email: EmailRecord) -> EmailMessage:
        message = EmailMessage()
        message["From"] = self.mail_from
        message["To"] = ", ".join(email.recipients)
        message["Subject"] = email.subject
        message["Date"] = formatdate(self.clock().timestamp(), usegmt=True)
        # Derived from the email row alone (make_msgid would add a timestamp and a random
        # part): a resend after a lost lease carries the same Message-ID, so receivers can
        # deduplicate it and the .eml fallback overwrites its own file.
        domain = self.mail_from.rpartition("@")[2] or "localhost"
        message["Message-ID"] = f"<{email.id}@{domain}>"
        message.set_content(email.text_body)
        message.add_alternative(email.html_body, subtype="html")
        return message

    async def attempt(self, email: EmailRecord, owner: str) -> EmailWritten:
        """Build and send one message; any exception is a failed attempt."""
        try:
            await self.mailer.send(self.build_message(email))
        except Exception as exc:  # any SMTP/OS failure: retried later, never a crash
            # The type only: SMTP errors quote recipient addresses (kept in last_error, which
            # only the tenant's own API shows).
            log.warning("email send failed", extra={"email": email.id, "error": type(exc).__name__})
            EMAIL_ATTEMPTS.labels("failed").inc()
            return self._failed(email, owner, exc)
        EMAIL_ATTEMPTS.labels("sent").inc()
        return EmailCompletion(
            email_id=email.id,
            owner=owner,
            status=EmailStatus.SENT.value,
            next_attempt_at=None,
            last_error=None,
        )

    def _failed(self, email: EmailRecord, owner: str, exc: Exception) -> EmailCompletion:
        wait = email_retry_seconds(email.attempt_count + 1, self.settings.max_attempts)
        next_at = None if wait is None else self.clock() + timedelta(seconds=wait)
        return EmailCompletion(
            email_id=email.id,
            owner=owner,
            status=(EmailStatus.FAILED if next_at is None else EmailStatus.PENDING).value,
            next_attempt_at=next_at,
            last_error=bound_error_message(f"{type(exc).__name__}: {exc}"),
        )
