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
from scheduler.domain.run import RunStatus
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
