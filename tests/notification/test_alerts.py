"""Alert requests -> in-app inbox + email: real SMTP (aiosmtpd on 127.0.0.1, plain, AUTH and
STARTTLS), the .eml fallback, dedup by event id, and the inbox API."""

from __future__ import annotations

import email
import email.policy
import json
import ssl
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from notification.adapters.mailers import EmlDirMailer, SmtpMailer
from notification.domain.alerts import Channel, InvalidAlertRequest, parse_alert_request
from tests.notification.conftest import Harness, token
from tests.notification.events import publish
from tests.notification.smtp import Inbox, send_due
from tests.support.processes import free_port

AUTO_PAUSE = {
    "tenant_id": "t1",
    "channels": ["email", "in_app"],
    "template": "schedule_auto_paused",
    "data": {
        "schedule_id": "sch_9",
        "schedule_name": "nightly-report",
        "last_error": "http_status: 500",
        "runs_path": "/v1/schedules/sch_9/runs",
    },
}


def wrapped(event_id: str, request: dict[str, Any]) -> bytes:
    env = {
        "id": event_id,
        "type": "notification.requested",
        "tenant_id": request["tenant_id"],
        "time": "2026-01-01T00:00:00+00:00",
        "schedule_id": "sch_9",
        "data": request,
    }
    return json.dumps(env).encode()


async def setup_contacts(h: Harness, emails: list[str]) -> None:
    resp = await h.client.put("/v1/alert-contacts", json={"emails": emails}, headers=token("t1"))
    assert resp.status_code == 200, resp.text


async def test_auto_pause_alert_reaches_smtp_and_inbox(
    make_harness: Any, db_url: str, smtp_server: tuple[Inbox, int]
) -> None:
    inbox, port = smtp_server
    h: Harness = await make_harness(db_url, mailer=SmtpMailer(f"smtp://127.0.0.1:{port}"))
    await setup_contacts(h, ["ops@example.com", "OPS@example.com", "dev@example.com"])
    await publish(h.bus, "notification-requests", wrapped("evt_pause_1", AUTO_PAUSE))
    assert await h.app.requests.run_once() == 1
    assert await send_due(h.app.container.emails) == 1

    [(envelope, message)] = inbox.messages
    assert sorted(envelope.rcpt_tos) == ["dev@example.com", "ops@example.com"]
    assert "nightly-report" in message["Subject"]
    assert message["From"] == "scheduler-alerts@localhost"
    text = message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    html = message.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert "nightly-report" in text
    assert "http_status: 500" in text
    assert "<strong>nightly-report</strong>" in html

    page = (await h.client.get("/v1/notifications/", headers=token("t1"))).json()
    [item] = page["items"]
    assert item["template"] == "schedule_auto_paused"
    assert "nightly-report" in item["title"]
    assert item["read"] is False
    read = await h.client.post(f"/v1/notifications/{item['id']}/read", headers=token("t1"))
    assert read.status_code == 200
    assert read.json()["read"] is True
    assert (
        await h.client.post(f"/v1/notifications/{item['id']}/read", headers=token("t2"))
    ).status_code == 404
    unread = await h.client.get("/v1/notifications/", params={"unread": True}, headers=token("t1"))
    assert unread.json()["items"] == []
    assert (await h.client.get("/v1/notifications/", headers=token("t2"))).json()["items"] == []


async def test_same_event_twice_alerts_once(make_harness: Any, sqlite_url: str) -> None:
    h: Harness = await make_harness(sqlite_url)
    await setup_contacts(h, ["ops@example.com"])
    raw = wrapped("evt_dup", AUTO_PAUSE)
    await publish(h.bus, "notification-requests", raw, raw)
    await h.app.requests.run_once()
    assert await send_due(h.app.container.emails) == 1
    page = (await h.client.get("/v1/notifications/", headers=token("t1"))).json()
    assert len(page["items"]) == 1


async def test_eml_fallback_and_bare_request(make_harness: Any, sqlite_url: str) -> None:
    h: Harness = await make_harness(sqlite_url)  # no NOTIFICATION_SMTP_URL
    assert isinstance(h.app.container.mailer, EmlDirMailer)
    await setup_contacts(h, ["ops@example.com"])
    await publish(h.bus, "notification-requests", json.dumps(AUTO_PAUSE).encode())
    await h.app.requests.run_once()
    await send_due(h.app.container.emails)
    files = list((h.settings.var_dir / "mail").glob("*.eml"))
    assert len(files) == 1
    parsed = email.message_from_bytes(files[0].read_bytes(), policy=email.policy.default)
    assert "nightly-report" in parsed["Subject"]
    assert parsed["To"] == "ops@example.com"
    # A re-read of the same bare request (same bus position) does not alert twice.
    await send_due(h.app.container.emails)
    assert len(list((h.settings.var_dir / "mail").glob("*.eml"))) == 1


async def test_in_app_only_and_no_contacts(make_harness: Any, sqlite_url: str) -> None:
    h: Harness = await make_harness(sqlite_url)
    await publish(h.bus, "notification-requests", wrapped("evt_a", AUTO_PAUSE))
    await h.app.requests.run_once()
    assert await send_due(h.app.container.emails) == 0
    assert len((await h.client.get("/v1/notifications/", headers=token("t1"))).json()["items"]) == 1


async def test_alert_contacts_validation(make_harness: Any, sqlite_url: str) -> None:
    h: Harness = await make_harness(sqlite_url)
    bad = await h.client.put(
        "/v1/alert-contacts", json={"emails": ["not-an-email"]}, headers=token("t1")
    )
    assert bad.status_code == 422
    assert bad.json()["field"].startswith("emails")
    assert (await h.client.get("/v1/alert-contacts", headers=token("t1"))).json() == {"emails": []}


async def test_smtp_failure_is_retried_later(make_harness: Any, sqlite_url: str) -> None:
    port = free_port()  # nothing listens here
    h: Harness = await make_harness(sqlite_url, mailer=SmtpMailer(f"smtp://127.0.0.1:{port}"))
    await setup_contacts(h, ["ops@example.com"])
    await publish(h.bus, "notification-requests", wrapped("evt_r", AUTO_PAUSE))
    await h.app.requests.run_once()
    emails = h.app.container.emails
    assert await send_due(emails) == 1  # attempted, failed
    assert await send_due(emails) == 0  # not due yet
    h.clock.advance(seconds=31)
    assert await send_due(emails) == 1  # retried


class _Auth:
    def __init__(self) -> None:
        self.logins: list[tuple[bytes, bytes]] = []

    def __call__(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        assert isinstance(auth_data, LoginPassword)
        self.logins.append((auth_data.login, auth_data.password))
        return AuthResult(success=auth_data.password == b"s3cret")


async def test_starttls_and_auth_from_url(tmp_path: Path) -> None:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    inbox, auth = Inbox(), _Auth()
    controller = Controller(
        inbox,
        hostname="127.0.0.1",
        port=free_port(),
        tls_context=server_ctx,
        require_starttls=True,  # the server refuses mail before STARTTLS
        authenticator=auth,
    )
    controller.start()
    try:
        mailer = SmtpMailer(
            f"smtp://alerts%40x:s3cret@127.0.0.1:{controller.port}", ssl_context=client_ctx
        )
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = "a@x.io", "b@x.io", "hi"
        message.set_content("hello")
        await mailer.send(message)
    finally:
        controller.stop()
    assert auth.logins == [(b"alerts@x", b"s3cret")]
    assert inbox.messages[0][1]["Subject"] == "hi"


def test_alert_request_shapes() -> None:
    bare = {
        "tenant_id": "t1",
        "channels": ["in_app"],
        "template": "schedule_auto_paused",
        "data": {"schedule_name": "n"},
    }
    parsed = parse_alert_request(bare, "notification-requests:0:7")
    assert parsed.id == "notification-requests:0:7"
    assert parsed.channels == frozenset({Channel.IN_APP})
    wrapped = {"id": "evt_1", "type": "x", "tenant_id": "t1", "time": "t", "data": bare}
    assert parse_alert_request(wrapped, "pos").id == "evt_1"
    defaulted = parse_alert_request({"tenant_id": "t", "template": "x"}, "p")
    assert defaulted.channels == frozenset(Channel)
    for bad in [
        [],
        {"template": "x"},
        {"tenant_id": "t", "template": "../etc"},
        {"tenant_id": "t", "template": "x", "channels": ["sms"]},
        {"tenant_id": "t", "template": "x", "data": []},
    ]:
        with pytest.raises(InvalidAlertRequest):
            parse_alert_request(bad, "p")
