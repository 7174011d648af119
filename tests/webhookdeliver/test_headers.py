"""Reserved header names, the tenant-header filter and our unsigned context headers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

import webhookdeliver as wd
from webhookdeliver.headers import MAX_TENANT_HEADERS, tenant_headers


@pytest.mark.parametrize(
    "name",
    [
        "X-Signature",
        "x-webhook-id",
        "X-TIMESTAMP",
        "X-Event-Type",
        "X-Attempt",
        "User-Agent",
        "Host",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
        "TE",
        "Upgrade",
        "Content-Type",
        "webhook-id",
        "Webhook-Signature",
        "webhook-anything-new",
    ],
)
def test_reserved_names(name):
    assert wd.is_reserved_header(name)


def test_reserved_headers_is_lower_case():
    assert all(name == name.lower() for name in wd.RESERVED_HEADERS)
    assert {"host", "content-length", "x-signature", "webhook-signature"} <= wd.RESERVED_HEADERS


def test_tenant_headers_drop_reserved_and_malformed():
    kept = tenant_headers(
        {
            "X-Tenant": "ok",
            "Authorization": "Bearer t",
            "HOST": "evil",
            "X-Bad": "a\r\nInjected: 1",
            "Bad Name": "v",
            "X-Nul": "a\x00b",
        }
    )
    assert kept == {"X-Tenant": "ok", "Authorization": "Bearer t"}


def test_tenant_headers_are_bounded():
    many = {f"X-H{i}": "v" for i in range(100)}
    assert len(tenant_headers(many)) == MAX_TENANT_HEADERS
    assert tenant_headers({"X-Big": "v" * 10_000}) == {}


@pytest.mark.parametrize("name", ["X-Schedule-Id", "x-scheduled-for", "X-TRIGGER"])
def test_a_tenant_header_cannot_set_or_repeat_our_context(name: str) -> None:
    headers = wd.build_headers(
        secrets=["whsec_c2VjcmV0"],
        webhook_id="run_1",
        event_type="schedule.triggered",
        attempt=1,
        timestamp=1_700_000_000,
        body=b"{}",
        user_agent="ua",
        extra={name: "forged", "X-Tenant": "kept"},
        context=wd.occurrence_headers(
            schedule_id="sch_1",
            # Any offset: the header is always UTC with Z.
            scheduled_for=datetime(2026, 3, 8, 10, 0, tzinfo=timezone(timedelta(hours=3))),
            trigger="schedule",
        ),
    )
    assert wd.is_reserved_header(name)
    lowered = [k.lower() for k in headers]
    assert len(lowered) == len(set(lowered))  # no name twice in another case
    assert headers["X-Tenant"] == "kept"
    assert "forged" not in headers.values()
    assert headers["X-Schedule-Id"] == "sch_1"
    assert headers["X-Scheduled-For"] == "2026-03-08T07:00:00Z"
    assert headers["X-Trigger"] == "schedule"


def test_context_headers_must_be_ours_and_instants_aware() -> None:
    with pytest.raises(ValueError, match="context header"):
        wd.Delivery(
            url="https://example.com/",
            body=b"{}",
            secrets=["whsec_c2VjcmV0"],
            webhook_id="run_1",
            event_type="schedule.triggered",
            attempt=1,
            context_headers={"X-Custom": "v"},
        )
    with pytest.raises(ValueError, match="naive"):
        wd.occurrence_headers(schedule_id="s", scheduled_for=datetime(2026, 1, 1), trigger="x")
    at = datetime(2026, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
    got = wd.occurrence_headers(schedule_id="s", scheduled_for=at, trigger="manual")
    assert got["X-Scheduled-For"] == "2026-01-01T00:00:00.250000Z"


def test_tenant_header_values_follow_rfc_9110_without_obs_text():
    # Tab and space are field-value characters; non-ASCII is obs-text, which receivers read
    # differently (servicekit.text.header_value_problem, the API's rule too).
    kept = tenant_headers({"X-Tab": "a\tb", "X-Umlaut": "M\u00fcller", "X-Nbsp": "a\u00a0b"})
    assert kept == {"X-Tab": "a\tb"}
