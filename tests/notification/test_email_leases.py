"""The email sender's lease discipline (the webhook dispatcher's): a completion is written only
under the lease it was made under, leases are renewed while a send is slow, a stop releases what
outlives its grace, and two senders on one database send every email once while leases hold.
The SMTP server is a real aiosmtpd on 127.0.0.1 that can hold its answer."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from notification.adapters.db import create_engine
from notification.adapters.email_store import SqlEmailStore
from notification.adapters.mailers import SmtpMailer
from notification.adapters.migrate import upgrade
from notification.adapters.sql_store import SqlNotificationStore
from notification.adapters.tables import outbound_emails
from notification.service_layer.email_sender import EmailSender, EmailSettings
from notification.service_layer.ports import Clock, NewEmail
from tests.notification.conftest import Harness, token
from tests.notification.events import publish
from tests.notification.smtp import Inbox, send_due, wait_arrived
from tests.support.pg import fresh_postgres_database

ALERT = {
    "tenant_id": "t1",
    "channels": ["email"],
    "template": "schedule_auto_paused",
    "data": {"schedule_id": "sch_1", "schedule_name": "nightly", "last_error": "boom"},
}


def real_clock() -> datetime:
    return datetime.now(UTC)


def another_sender(h: Harness, clock: Clock | None = None, **settings: Any) -> EmailSender:
    """A second sender on the same database, as another replica would run it."""
    s = h.app.container.emails
    return EmailSender(
        s.store,
        s.mailer,
        clock or s.clock,
        mail_from=s.mail_from,
        settings=replace(s.settings, **settings),
    )


async def one_due_email(h: Harness) -> None:
    resp = await h.client.put(
        "/v1/alert-contacts", json={"emails": ["ops@example.com"]}, headers=token("t1")
    )
    assert resp.status_code == 200, resp.text
    await publish(h.bus, "notification-requests", json.dumps({"id": "evt_1", **ALERT}).encode())
    assert await h.app.requests.run_once() == 1


async def email_rows(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(outbound_emails))).mappings().all()
    return [dict(r) for r in rows]


async def smtp_harness(make_harness: Any, db_url: str, port: int) -> Harness:
    h: Harness = await make_harness(db_url, mailer=SmtpMailer(f"smtp://127.0.0.1:{port}"))
    return h


async def test_completion_after_lease_loss_is_dropped_not_written(
    make_harness: Any, db_url: str, smtp_server: tuple[Inbox, int]
) -> None:
    inbox, port = smtp_server
    h = await smtp_harness(make_harness, db_url, port)
    await one_due_email(h)
    first, second = h.app.container.emails, another_sender(h)
    # The first send is slow and then refused; by then its lease has run out.
    inbox.delays = [1.0]
    inbox.replies = ["451 4.3.0 try again later"]
    assert (await first.pipeline.pump())[0] == 1
    await wait_arrived(inbox)
    h.clock.advance(seconds=first.settings.lease_seconds + 1)

    assert await send_due(second) == 1  # the other replica takes it over and sends it
    await first.pipeline.drain()  # the late refusal finds the lease taken over: dropped

    assert (first.pipeline.dropped, second.pipeline.dropped) == (1, 0)
    assert (first.pipeline.written, second.pipeline.written) == (0, 1)
    [row] = await email_rows(h.app.container.engine)
    assert row["status"] == "sent"
    assert row["attempt_count"] == 1
    assert row["last_error"] is None
    assert (row["lease_owner"], row["lease_expires_at"]) == (None, None)
    assert len(inbox.messages) == 1


async def test_lease_is_extended_while_a_send_is_slow(
    make_harness: Any, db_url: str, smtp_server: tuple[Inbox, int]
) -> None:
    inbox, port = smtp_server
    h = await smtp_harness(make_harness, db_url, port)
    await one_due_email(h)
    lease = 3.0  # renewed every second: slack for a loaded machine
    first = another_sender(h, real_clock, lease_seconds=lease, idle_poll_seconds=0.05)
    second = another_sender(h, real_clock, lease_seconds=lease)
    inbox.delays = [3 * lease]  # the relay holds its answer for three leases
    running = asyncio.create_task(first.pipeline.run())
    try:
        await wait_arrived(inbox)
        taken = 0
        for _ in range(6):  # the lease would have expired ~3 times without renewal
            await asyncio.sleep(lease / 2)
            taken += (await second.pipeline.pump())[0]
    finally:
        await first.pipeline.stop(grace_seconds=10)
        await running
        await second.pipeline.stop(grace_seconds=10)
    assert taken == 0
    assert len(inbox.messages) == 1
    [row] = await email_rows(h.app.container.engine)
    assert (row["status"], row["attempt_count"]) == ("sent", 1)
    assert (first.pipeline.written, first.pipeline.dropped) == (1, 0)


async def test_stop_releases_the_sends_that_outlive_the_grace(
    make_harness: Any, sqlite_url: str, smtp_server: tuple[Inbox, int]
) -> None:
    inbox, port = smtp_server
    h = await smtp_harness(make_harness, sqlite_url, port)
    await one_due_email(h)
    first, second = h.app.container.emails, another_sender(h)
    inbox.delays = [2.0]
    running = asyncio.create_task(first.pipeline.run())
    await wait_arrived(inbox)
    await first.pipeline.stop(grace_seconds=0.1)
    await running
    assert first.pipeline.held == 0
    # Released, not left to its lease: due again at once (the clock has not moved).
    assert await send_due(second) == 1
    [row] = await email_rows(h.app.container.engine)
    assert (row["status"], row["attempt_count"]) == ("sent", 1)  # the cancelled send not counted


@pytest.mark.postgres
async def test_two_senders_send_each_email_once(
    tmp_path: Path, smtp_server: tuple[Inbox, int]
) -> None:
    """Two senders (each with its own engine, as two replicas) on one PostgreSQL database: with
    leases of 2 s, a claim's sends take longer than a lease in all and every sixth send holds
    the relay for 5 s, so only lease renewal keeps a second sender off them."""
    inbox, port = smtp_server
    count, lease = 60, 2.0
    inbox.delays = [5.0 if i % 6 == 0 else 0.05 for i in range(count)]
    async with fresh_postgres_database("notif_emails") as url:
        setup = create_engine(url)
        engines = [create_engine(url), create_engine(url)]
        try:
            await upgrade(setup)
            store = SqlNotificationStore(setup)
            now = real_clock()
            for i in range(count):
                email = NewEmail(f"eml_{i:03d}", ["ops@example.com"], f"alert {i}", "t", "<p>h</p>")
                assert await store.record_alert(f"req_{i}", "t1", "generic", None, email, now)
            settings = EmailSettings(lease_seconds=lease, idle_poll_seconds=0.05, claim_batch=20)
            senders = [
                EmailSender(
                    SqlEmailStore(engine),
                    SmtpMailer(f"smtp://127.0.0.1:{port}"),
                    real_clock,
                    mail_from="alerts@example.com",
                    settings=settings,
                )
                for engine in engines
            ]
            tasks = [asyncio.create_task(s.pipeline.run()) for s in senders]
            try:
                deadline = time.monotonic() + 60
                while any(r["status"] == "pending" for r in await email_rows(setup)):
                    assert time.monotonic() < deadline, "emails still pending after 60 s"
                    await asyncio.sleep(0.1)
            finally:
                for s in senders:
                    await s.pipeline.stop(grace_seconds=10)
                await asyncio.gather(*tasks)
            rows = await email_rows(setup)
        finally:
            for engine in (setup, *engines):
                await engine.dispose()
    subjects = [str(m["Subject"]) for _, m in inbox.messages]
    assert sorted(set(subjects)) == sorted(f"alert {i}" for i in range(count))  # none lost
    assert set(inbox.message_ids()) == {f"<eml_{i:03d}@example.com>" for i in range(count)}
    assert {r["status"] for r in rows} == {"sent"}
    assert sum(s.pipeline.written for s in senders) == count  # one completion written per email
    # A stalled loop on a loaded machine may still lose a lease: then, and only then, an email
    # goes out twice (at-least-once), and the loser's completion is dropped, never written.
    assert len(subjects) - count == sum(s.pipeline.dropped for s in senders)
    assert all(s.pipeline.written > 0 for s in senders)  # both took part
