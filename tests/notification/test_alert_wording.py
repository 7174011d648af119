"""The auto-pause alert's wording is right for every breaker threshold: one failed run is not
"repeated failures", five are "5 times in a row"; the subject, the in-app notification and both
email parts (text and HTML) say how to resume. Rendered through the real path: an alert request
on the bus -> notification's consumer -> a real SMTP server and the inbox API."""

from __future__ import annotations

from typing import Any

import pytest

from notification.adapters.mailers import SmtpMailer
from tests.notification.conftest import Harness, token
from tests.notification.events import publish
from tests.notification.smtp import Inbox, send_due
from tests.notification.test_alerts import setup_contacts, wrapped


def auto_paused(failures: int) -> dict[str, Any]:
    """The request the scheduler's breaker sends (scheduler/domain/breaker.py breaker_alert)."""
    return {
        "tenant_id": "t1",
        "channels": ["email", "in_app"],
        "template": "schedule_auto_paused",
        "data": {
            "schedule_id": "sch_9",
            "schedule_name": "nightly-report",
            "last_error": "http_status: 500",
            "runs_path": "/v1/schedules/sch_9/runs",
            "consecutive_failures": failures,
            "failure_threshold": failures,
            "resume_path": "/v1/schedules/sch_9/resume",
        },
    }


async def _render(make_harness: Any, db_url: str, smtp: tuple[Inbox, int], failures: int) -> Any:
    inbox, port = smtp
    h: Harness = await make_harness(db_url, mailer=SmtpMailer(f"smtp://127.0.0.1:{port}"))
    await setup_contacts(h, ["ops@example.com"])
    await publish(h.bus, "notification-requests", wrapped(f"evt_{failures}", auto_paused(failures)))
    assert await h.app.requests.run_once() == 1
    assert await send_due(h.app.container.emails) == 1
    [(_, message)] = inbox.messages
    [item] = (await h.client.get("/v1/notifications/", headers=token("t1"))).json()["items"]
    text = message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    html = message.get_body(("html",)).get_content()  # type: ignore[union-attr]
    return message["Subject"], text, html, item


@pytest.mark.parametrize(
    ("failures", "says"),
    [(1, "its last run failed"), (5, "it failed 5 times in a row")],
)
async def test_wording_matches_the_threshold_and_both_parts_say_how_to_resume(
    make_harness: Any,
    db_url: str,
    smtp_server: tuple[Inbox, int],
    failures: int,
    says: str,
) -> None:
    subject, text, html, item = await _render(make_harness, db_url, smtp_server, failures)
    for part in (subject, text, html, item["title"], item["body"]):
        assert "repeated" not in part.lower()
        assert "one after another" not in part
    if failures == 1:
        assert subject == 'Schedule "nightly-report" was paused after a failed run'
        assert "in a row" not in subject + text + html
        assert "1 failed run" in text
        assert "1 failed run" in html
    else:
        assert subject == 'Schedule "nightly-report" was paused after 5 failed runs in a row'
    for part in (text, html, item["body"]):
        assert says in " ".join(part.split())
    for part in (text, html):  # both parts: the call that resumes it, and what resuming does
        assert "POST /v1/schedules/sch_9/resume" in part
        assert "schedules:write" in part
        assert "resets the breaker" in part
    assert "<strong>nightly-report</strong>" in html
