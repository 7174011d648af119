"""The alert requests the scheduler writes render with notification's own templates (not the
generic fallback): the contract between the two services' `notification-requests` data and the
Jinja templates (StrictUndefined, so a missing field would fall back)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from notification.adapters.rendering import JinjaAlertRenderer
from scheduler.domain.breaker import PAUSED_REASON_BREAKER, breaker_alert, count_finished_run
from scheduler.domain.policies import (
    Action,
    BreakerPolicy,
)
from scheduler.domain.run import Attempt, RunStatus
from scheduler.domain.schedule import Schedule
from scheduler.domain.tenant import Entitlements, QuotaViolation
from scheduler.service_layer.quota import MAX_ALERT_SCHEDULES, quota_alert
from tests.scheduler.definitions import definition

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def schedule(i: int, threshold: int = 5) -> Schedule:
    return Schedule.create(
        id=f"sch_{i:04d}",
        tenant_id="t1",
        definition=definition(
            name=f"report-{i} <b>",
            cron="*/5 * * * *",
            action=Action.EVENT,
            breaker=BreakerPolicy(failure_threshold=threshold),
        ),
        next_run_at=None,
        now=NOW,
    )


def test_quota_paused_alert_renders_its_template() -> None:
    count = MAX_ALERT_SCHEDULES + 2
    paused = [(schedule(i), QuotaViolation("max_schedules", 3, 3 + count)) for i in range(count)]
    request = quota_alert("t1", paused, Entitlements(max_schedules=3), NOW, "evt_1")
    data = request.data
    assert data["template"] == "schedule_quota_paused"

    rendered = JinjaAlertRenderer().render(data["template"], data["data"])

    assert rendered.subject == f"{count} schedules were paused: over your plan's limits"
    assert '"report-0 <b>" (sch_0000): max_schedules is 3' in rendered.text
    assert "... and 2 more." in rendered.text  # only the first MAX_ALERT_SCHEDULES are listed
    assert "max_schedules: 3" in rendered.text
    assert "report-0 &lt;b&gt;" in rendered.html  # tenant names are escaped in HTML
    assert "report-0 <b>" not in rendered.html


@pytest.mark.parametrize("threshold", [1, 5])
def test_breaker_alert_renders_its_wording_for_the_threshold(threshold: int) -> None:
    s = schedule(7, threshold=threshold)
    tripped = [count_finished_run(s, RunStatus.FAILED) for _ in range(threshold)]
    assert tripped == [False] * (threshold - 1) + [True]
    s.pause(PAUSED_REASON_BREAKER, NOW)
    data = breaker_alert(s, "http_status: HTTP 500", NOW).data

    rendered = JinjaAlertRenderer().render(data["template"], data["data"])

    assert data["template"] == "schedule_auto_paused"
    assert "repeated" not in rendered.subject + rendered.text + rendered.html
    if threshold == 1:
        assert rendered.subject == 'Schedule "report-7 <b>" was paused after a failed run'
        assert "its last run failed" in rendered.text
        assert "in a row" not in rendered.text + rendered.html
    else:
        assert rendered.subject == 'Schedule "report-7 <b>" was paused after 5 failed runs in a row'
        assert "it failed 5 times in a row" in " ".join(rendered.html.split())
    for part in (rendered.text, rendered.html):
        assert "POST /v1/schedules/sch_0007/resume" in part


def test_breaker_alert_links_the_console_and_quotes_the_failure() -> None:
    s = schedule(8, threshold=1)
    assert count_finished_run(s, RunStatus.FAILED)
    s.pause(PAUSED_REASON_BREAKER, NOW)
    attempt = Attempt(
        run_id="run_42",
        number=1,
        started_at=NOW,
        duration_ms=12,
        status_code=500,
        error_kind="http_status",
        error_message="HTTP 500",
        response_excerpt="down <img src=x>",
    )
    data = breaker_alert(s, "http_status: HTTP 500", NOW, run_id="run_42", attempt=attempt).data
    assert (data["data"]["run_id"], data["data"]["status_code"]) == ("run_42", 500)

    console = "https://scheduler.example.com"
    rendered = JinjaAlertRenderer(console_url=console).render(data["template"], data["data"])

    page = f"{console}/#/schedules/sch_0008"
    assert f"{page}\n" in rendered.text
    assert f"{page}/runs/run_42\n" in rendered.text
    assert "HTTP 500" in rendered.text
    assert "down <img src=x>" in rendered.text  # plain text: the excerpt as received
    assert f'href="{page}"' in rendered.html
    assert f'href="{page}/runs/run_42"' in rendered.html
    assert "<pre>down &lt;img src=x&gt;</pre>" in rendered.html  # escaped in HTML
    # The curl line stays for API users, on the console's origin (it serves /v1 too).
    for part in (rendered.text, rendered.html):
        assert f"curl -X POST {console}/v1/schedules/sch_0008/resume" in part
        assert "scheduler&gt;" not in part
        assert "<scheduler>" not in part

    # Without CONSOLE_PUBLIC_URL: API paths only, no link to nowhere.
    bare = JinjaAlertRenderer().render(data["template"], data["data"])
    assert "#/schedules" not in bare.text + bare.html
    assert "Run history: /v1/schedules/sch_0008/runs" in bare.text


def test_too_fast_alert_renders_its_template() -> None:
    from scheduler.domain.completion import too_fast_alert
    from scheduler.domain.run import Run

    run = Run.planned(
        tenant_id="t1",
        schedule_id="sch_0009",
        scheduled_for=NOW,
        now=NOW,
        run_id="run_77",
    )
    run.completion_detail = "0 rows <exported>"
    request = too_fast_alert(
        run, "backup <b>", min_duration_seconds=60, duration_seconds=4.25, now=NOW
    )
    data = request.data
    assert (request.topic, data["template"]) == ("notification-requests", "schedule_run_too_fast")
    assert data["channels"] == ["email", "in_app"]

    console = "https://scheduler.example.com"
    rendered = JinjaAlertRenderer(console_url=console).render(data["template"], data["data"])

    assert rendered.subject == (
        'Schedule "backup <b>" finished a run too fast (4.2 s, expected at least 60 s)'
    )
    assert "completion.min_duration_seconds (60 s)" in rendered.text
    assert f"{console}/#/schedules/sch_0009/runs/run_77" in rendered.text
    assert "0 rows <exported>" in rendered.text
    assert "backup &lt;b&gt;" in rendered.html
    assert "0 rows &lt;exported&gt;" in rendered.html
    bare = JinjaAlertRenderer().render(data["template"], data["data"])
    assert "GET /v1/schedules/sch_0009/runs/run_77" in bare.text
