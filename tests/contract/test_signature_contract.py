"""The shared contract (ADR-0032 §2): a scheduler delivery and a notification delivery of the same
secret, id, timestamp and body carry byte-identical signature headers, and one receiver function
verifies both. Both deliveries go through each service's real send path to a loopback receiver."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from standardwebhooks import Webhook

import webhookdeliver as wd
from authclient import AuthSettings, TokenVerifier, mint_token
from eventbus import InProcessBus, Message
from eventbus.envelope import encode, envelope
from notification.config import NotificationSettings
from notification.entrypoints.runtime import build_notification
from scheduler.adapters.actions import WebhookAction
from scheduler.domain.policies import Action, OverlapPolicy, RetryPolicy
from scheduler.domain.run import Run
from scheduler.domain.schedule import Target
from scheduler.service_layer.run_ports import DeliverySpec
from servicekit.data.secretbox import generate_key
from tests.notification.dispatch import deliver_due
from tests.support.http import Recorded, recording_receiver

AUTH_KEY = "contract-test-key-" + "k" * 40
SIGNATURE_HEADERS = (
    "X-Webhook-Id",
    "X-Timestamp",
    "X-Signature",
    "X-Event-Type",
    "X-Attempt",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "Content-Type",
)


def receiver_verifies(secrets: list[str], headers: dict[str, str], body: bytes) -> bool:
    """What a tenant writes once, for both services: our scheme and the Standard Webhooks one."""
    if not wd.verify(secrets, headers, body):
        return False
    Webhook(secrets[0]).verify(body, {k.lower(): v for k, v in headers.items()})
    return True


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, Recorded]]:
    async with recording_receiver() as got:
        yield got


async def notification_delivery(
    tmp_path: Path, url: str, fixed_ts: int, seen: Recorded
) -> tuple[str, dict[str, str], bytes]:
    """Subscribe, publish one schedule.triggered event, let notification deliver it once."""
    settings = NotificationSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/notification.db",
        secret_key=SecretStr(generate_key()),
        var_dir=tmp_path / "var",
        webhook_allow_private_networks=True,
        kafka_bootstrap_servers=None,
        smtp_url=None,
        dev=True,
    )
    bus = InProcessBus()
    deliverer = wd.Deliverer(allow_private_networks=True, clock=lambda: float(fixed_ts))
    verifier = TokenVerifier(AuthSettings(AUTH_HS256_KEY=SecretStr(AUTH_KEY)))
    app = build_notification(settings, bus, delivery_client=deliverer, verifier=verifier)
    await app.start(run_workers=False)
    try:
        token = mint_token(AUTH_KEY, tenant_id="t1", scopes=["notifications:write"])
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app.asgi_app), base_url="http://n"
        ) as client:
            resp = await client.post(
                "/v1/subscriptions/",
                json={"url": url, "event_types": ["schedule.*"]},
                headers={"Authorization": f"Bearer {token}"},
            )
        assert resp.status_code == 201, resp.text
        secret: str = resp.json()["secret"]
        event = envelope(
            id="evt_contract",
            type="schedule.triggered",
            tenant_id="t1",
            time=datetime.now(UTC),
            data={"report": "daily", "ünïcode": "✓"},
            schedule_id="sch_contract",
        )
        publisher = bus.publisher()
        await publisher.start()
        await publisher.publish(
            [Message(topic="schedule-events", key="sch_contract", value=encode(event))]
        )
        await publisher.stop()
        assert await app.events.run_once() == 1
        assert await deliver_due(app.container.dispatcher) == 1
    finally:
        await app.stop()
        await deliverer.close()
    assert len(seen) == 1
    headers, body = seen.pop()
    return secret, headers, body


async def scheduler_delivery(
    url: str,
    secret: str,
    webhook_id: str,
    payload: Any,
    fixed_ts: int,
    seen: Recorded,
) -> tuple[dict[str, str], bytes]:
    """One attempt of a scheduler run through its webhook action (the dispatcher's send path)."""
    now = datetime.now(UTC)
    run = Run.planned(
        tenant_id="t1",
        schedule_id="sch_contract",
        scheduled_for=now,
        now=now,
        payload=payload,
        run_id=webhook_id,
    )
    spec = DeliverySpec(
        schedule_id="sch_contract",
        tenant_id="t1",
        name="contract",
        action=Action.WEBHOOK,
        active=True,
        deleted=False,
        target=Target(url=url, headers={"X-Team": "ops"}, timeout_seconds=5),
        retry_policy=RetryPolicy(
            max_attempts=5,
            initial_backoff_seconds=10.0,
            max_backoff_seconds=3600.0,
            multiplier=2.0,
            max_retry_duration_seconds=86_400.0,
        ),
        overlap_policy=OverlapPolicy.ALLOW,
        secrets=(secret,),
    )
    async with wd.Deliverer(allow_private_networks=True, clock=lambda: float(fixed_ts)) as d:
        result = await WebhookAction(d).perform(run, spec, 1)
    assert result.outcome.ok, result.outcome
    assert len(seen) == 1
    return seen.pop()


async def test_both_services_sign_identically_and_one_receiver_verifies_both(
    tmp_path: Path, receiver: tuple[str, Recorded]
) -> None:
    url, seen = receiver
    fixed_ts = int(time.time())
    secret, n_headers, n_body = await notification_delivery(tmp_path, url, fixed_ts, seen)
    s_headers, s_body = await scheduler_delivery(
        url, secret, n_headers["X-Webhook-Id"], json.loads(n_body), fixed_ts, seen
    )

    # Same inputs (the body bytes are the precondition, not the claim)...
    assert s_body == n_body
    # ...give byte-identical signature headers from both services.
    for name in SIGNATURE_HEADERS:
        assert s_headers[name] == n_headers[name], name
    assert s_headers["X-Signature"] == wd.sign(secret, n_headers["X-Webhook-Id"], fixed_ts, n_body)
    assert s_headers["X-Team"] == "ops"  # tenant header kept, ours untouched

    # One receiver function verifies both; a tampered body fails for both.
    assert receiver_verifies([secret], n_headers, n_body)
    assert receiver_verifies([secret], s_headers, s_body)
    assert not wd.verify([secret], n_headers, n_body + b" ")
    assert not wd.verify([secret], s_headers, s_body + b" ")
