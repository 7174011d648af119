"""Notification retention over real SQL (SQLite and PostgreSQL): finished deliveries, the inbox,
finished emails and alert dedup ids go after their retention; unfinished work and young rows
stay; batches are bounded; the step runs only when due. Rows are written directly so each test
sets exact ages; `now` is passed in or comes from the injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from notification.adapters.retention_store import SqlRetentionStore
from notification.adapters.tables import (
    alert_requests,
    delivery_attempts,
    notifications,
    outbound_emails,
    subscriptions,
    webhook_deliveries,
)
from notification.config import NotificationSettings
from notification.entrypoints.retention import retention_policy, retention_worker
from notification.service_layer.retention import RetainedTable, RetentionPolicy, prune_once
from servicekit.data.retention import BACKLOG_PAUSE_SECONDS
from tests.notification.conftest import Harness

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
POLICY = RetentionPolicy()  # 30 days of deliveries, 90 days of inbox


async def insert(engine: AsyncEngine, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    async with engine.begin() as conn:
        await conn.execute(sa.insert(table), rows)


async def add_subscription(engine: AsyncEngine, sid: str, deleted_at: datetime | None) -> None:
    await insert(
        engine,
        subscriptions,
        [
            {
                "id": sid,
                "tenant_id": "t1",
                "url": "https://example.com/hook",
                "event_types": ["schedule.*"],
                "enabled": deleted_at is None,
                "secret_enc": "x",
                "consecutive_failures": 0,
                "created_at": NOW - 400 * DAY,
                "updated_at": NOW - 400 * DAY,
                "deleted_at": deleted_at,
            }
        ],
    )


async def add_delivery(
    engine: AsyncEngine, did: str, sid: str, status: str, finished_at: datetime | None
) -> None:
    await insert(
        engine,
        webhook_deliveries,
        [
            {
                "id": did,
                "tenant_id": "t1",
                "subscription_id": sid,
                "event_id": f"evt-{did}",
                "event_type": "schedule.created",
                "body": b"{}",
                "status": status,
                "attempt_count": 2,
                "round_attempts": 2,
                "next_attempt_at": None if finished_at else NOW,
                "created_at": (finished_at or NOW) - DAY,
                "updated_at": finished_at or NOW,
                "finished_at": finished_at,
            }
        ],
    )
    await insert(
        engine,
        delivery_attempts,
        [
            {"delivery_id": did, "number": n, "started_at": NOW - 400 * DAY, "duration_ms": 3}
            for n in (1, 2)
        ],
    )


async def add_alert(
    engine: AsyncEngine,
    rid: str,
    created_at: datetime,
    *,
    inbox: bool = True,
    email_status: str | None = "sent",
) -> None:
    await insert(
        engine,
        alert_requests,
        [
            {
                "id": rid,
                "tenant_id": "t1",
                "template": "schedule_auto_paused",
                "created_at": created_at,
            }
        ],
    )
    if inbox:
        await insert(
            engine,
            notifications,
            [
                {
                    "id": f"ntf-{rid}",
                    "tenant_id": "t1",
                    "request_id": rid,
                    "template": "schedule_auto_paused",
                    "title": "t",
                    "body": "b",
                    "data": {},
                    "created_at": created_at,
                }
            ],
        )
    if email_status:
        await insert(
            engine,
            outbound_emails,
            [
                {
                    "id": f"eml-{rid}",
                    "tenant_id": "t1",
                    "request_id": rid,
                    "recipients": ["ops@example.com"],
                    "subject": "s",
                    "text_body": "t",
                    "html_body": "h",
                    "status": email_status,
                    "attempt_count": 1,
                    "created_at": created_at,
                }
            ],
        )


async def ids(engine: AsyncEngine, column: sa.ColumnElement[Any]) -> set[Any]:
    async with engine.connect() as conn:
        return set((await conn.execute(sa.select(column))).scalars().all())


@pytest.fixture
async def engine(harness: Harness) -> AsyncEngine:
    return harness.app.container.engine  # migrated on start (dev)


async def test_finished_deliveries_go_unfinished_and_young_stay(engine: AsyncEngine) -> None:
    await add_subscription(engine, "sub_live", None)
    old, young = NOW - 31 * DAY, NOW - 29 * DAY
    await add_delivery(engine, "d_ok_old", "sub_live", "succeeded", old)
    await add_delivery(engine, "d_dead_old", "sub_live", "dead", old)
    await add_delivery(engine, "d_ok_young", "sub_live", "succeeded", young)
    await add_delivery(engine, "d_pending", "sub_live", "pending", None)
    await add_delivery(engine, "d_retrying", "sub_live", "retrying", None)

    report = await prune_once(SqlRetentionStore(engine), POLICY, NOW)

    kept = {"d_ok_young", "d_pending", "d_retrying"}
    assert await ids(engine, webhook_deliveries.c.id) == kept
    assert await ids(engine, delivery_attempts.c.delivery_id) == kept
    assert report.deleted[RetainedTable.WEBHOOK_DELIVERIES] == 2
    assert report.deleted[RetainedTable.DELIVERY_ATTEMPTS] == 4
    assert await ids(engine, subscriptions.c.id) == {"sub_live"}  # live: never purged


async def test_deleted_subscription_is_purged_with_all_its_deliveries(
    engine: AsyncEngine,
) -> None:
    await add_subscription(engine, "sub_gone", NOW - 31 * DAY)
    await add_subscription(engine, "sub_recent", NOW - 5 * DAY)
    # A deleted subscription is never delivered to again: even its pending rows go.
    await add_delivery(engine, "d_gone_pending", "sub_gone", "pending", None)
    await add_delivery(engine, "d_gone_ok", "sub_gone", "succeeded", NOW - DAY)
    await add_delivery(engine, "d_recent", "sub_recent", "pending", None)

    await prune_once(SqlRetentionStore(engine), POLICY, NOW)

    assert await ids(engine, subscriptions.c.id) == {"sub_recent"}
    assert await ids(engine, webhook_deliveries.c.id) == {"d_recent"}
    assert await ids(engine, delivery_attempts.c.delivery_id) == {"d_recent"}


async def test_inbox_emails_and_alert_ids_go_after_the_inbox_retention(
    engine: AsyncEngine,
) -> None:
    old, young = NOW - 91 * DAY, NOW - 89 * DAY
    await add_alert(engine, "req-old", old)
    await add_alert(engine, "req-young", young)
    await add_alert(engine, "req-failed-mail", old, inbox=False, email_status="failed")
    # An unsent email keeps itself and its request: work is never dropped by retention.
    await add_alert(engine, "req-pending-mail", old, email_status="pending")

    report = await prune_once(SqlRetentionStore(engine), POLICY, NOW)

    assert await ids(engine, notifications.c.id) == {"ntf-req-young"}
    assert await ids(engine, outbound_emails.c.id) == {"eml-req-young", "eml-req-pending-mail"}
    assert await ids(engine, alert_requests.c.id) == {"req-young", "req-pending-mail"}
    assert report.deleted[RetainedTable.NOTIFICATIONS] == 2
    assert report.deleted[RetainedTable.OUTBOUND_EMAILS] == 2
    assert report.deleted[RetainedTable.ALERT_REQUESTS] == 2


async def test_batches_and_passes_are_bounded(engine: AsyncEngine) -> None:
    await add_subscription(engine, "sub_live", None)
    for i in range(5):
        await add_delivery(engine, f"d{i}", "sub_live", "succeeded", NOW - (40 + i) * DAY)
    store = SqlRetentionStore(engine)
    one = await store.delete_finished_deliveries(NOW - 30 * DAY, 2)
    assert one.rows == 2
    # Oldest first: the two oldest went.
    assert await ids(engine, webhook_deliveries.c.id) == {"d0", "d1", "d2"}

    small = RetentionPolicy(batch_size=2, max_batches=1)
    first = await prune_once(store, small, NOW)
    assert first.deleted[RetainedTable.WEBHOOK_DELIVERIES] == 2
    assert first.more
    second = await prune_once(store, small, NOW)
    assert second.deleted[RetainedTable.WEBHOOK_DELIVERIES] == 1
    assert not second.more
    assert await ids(engine, webhook_deliveries.c.id) == set()


async def test_worker_pauses_an_interval_between_passes_and_a_second_during_a_backlog(
    harness: Harness,
) -> None:
    engine = harness.app.container.engine
    await add_subscription(engine, "sub_live", None)
    harness.clock.now = NOW
    worker = retention_worker(
        SqlRetentionStore(engine),
        RetentionPolicy(batch_size=2, max_batches=1),
        harness.clock,
        interval_seconds=300,
        first_pass_delay_seconds=30,
    )
    assert worker.loop.start_delay_seconds == 30  # start-up goes first
    await add_delivery(engine, "d_old", "sub_live", "succeeded", NOW - 31 * DAY)
    await add_delivery(engine, "d_old2", "sub_live", "dead", NOW - 31 * DAY)
    await add_delivery(engine, "d_old3", "sub_live", "dead", NOW - 32 * DAY)
    assert await worker.step() == BACKLOG_PAUSE_SECONDS  # one row left behind
    assert await worker.step() == 300
    assert worker.last_report is not None
    assert await ids(engine, webhook_deliveries.c.id) == set()
    # The app runs the same worker, at the configured interval.
    assert harness.app.retention.interval_seconds == harness.settings.retention_interval_seconds
    short = retention_worker(SqlRetentionStore(engine), POLICY, harness.clock, interval_seconds=5)
    assert short.loop.start_delay_seconds == 5  # never later than one interval


def test_settings_names_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert retention_policy(NotificationSettings()) == RetentionPolicy()
    monkeypatch.setenv("NOTIFICATION_DELIVERY_RETENTION_DAYS", "7")
    monkeypatch.setenv("NOTIFICATION_INBOX_RETENTION_DAYS", "365")
    monkeypatch.setenv("NOTIFICATION_RETENTION_BATCH_SIZE", "100")
    monkeypatch.setenv("NOTIFICATION_RETENTION_INTERVAL_SECONDS", "60")
    settings = NotificationSettings()
    assert retention_policy(settings) == RetentionPolicy(
        delivery_retention=timedelta(days=7), inbox_retention=timedelta(days=365), batch_size=100
    )
    assert settings.retention_interval_seconds == 60
    monkeypatch.setenv("NOTIFICATION_DELIVERY_RETENTION_DAYS", "0")
    with pytest.raises(ValueError, match="delivery_retention_days"):
        NotificationSettings()
