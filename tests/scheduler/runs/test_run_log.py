"""The settle's log lines (service_layer/run_log.py): one per settled attempt or terminal run,
at debug level in `serve` and info under `make run` (SCHEDULER_LOG_RUNS); none for a release or
a result whose lease was lost; a breaker pause at warning. Fields only, never a payload or text."""

from __future__ import annotations

import logging

import pytest

from scheduler.config import SchedulerSettings
from scheduler.service_layer.run_log import RunLog
from scheduler.service_layer.run_ports import Completion
from tests.scheduler.runs.test_run import LEASE, at, claimed, fail, ok, pending

LOGGER = "scheduler.runs"


def _settled(run_outcome: str) -> Completion:
    run = claimed()
    if run_outcome == "succeeded":
        run.record_attempt("w1", ok(at(1)), at(2), None)
    else:  # failed with a retry due in 30 s
        run.record_attempt("w1", fail(at(1)), at(2), 30.0)
    return Completion.of(run, "w1", schedule_name="nightly-report")


def test_serve_logs_runs_at_debug_and_make_run_at_info(caplog: pytest.LogCaptureFixture) -> None:
    done, retrying = _settled("succeeded"), _settled("retrying")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    RunLog().settled([done, retrying], [], at(2))
    RunLog(verbose=True).settled([done], [], at(2))
    lines = [r for r in caplog.records if r.name == LOGGER]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (logging.DEBUG, "run succeeded"),
        (logging.DEBUG, "run retrying"),
        (logging.INFO, "run succeeded"),
    ]
    first, second = lines[0].__dict__, lines[1].__dict__
    assert (first["schedule"], first["run_id"], first["attempt"]) == (
        "nightly-report",
        done.run.id,
        1,
    )
    assert first["status_code"] == 204
    assert (second["status_code"], second["error_kind"], second["retry_in_s"]) == (
        503,
        "http_status",
        30.0,
    )
    assert not any("busy" in str(v) for r in lines for v in r.__dict__.values())  # no excerpt
    # Off by default: serve's per-run lines wait for LOG_LEVEL=DEBUG or SCHEDULER_LOG_RUNS.
    assert SchedulerSettings.model_fields["log_runs"].default is False


def test_at_info_level_nothing_for_serve_and_nothing_for_lost_or_released(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    RunLog().settled([_settled("succeeded")], [], at(2))
    lost = _settled("succeeded")
    released = claimed(run=pending())
    released.release("w1", at(LEASE))
    RunLog(verbose=True).settled([lost, Completion.of(released, "w1")], [lost.run.id], at(2))
    assert [r for r in caplog.records if r.name == LOGGER] == []


def test_a_breaker_pause_is_a_warning_naming_the_schedule(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    failed = _settled("retrying")
    RunLog().paused([failed], [failed.run.schedule_id])
    (line,) = [r for r in caplog.records if r.name == LOGGER]
    assert line.levelno == logging.WARNING
    assert line.getMessage() == "schedule paused by the breaker"
    assert (line.__dict__["schedule"], line.__dict__["run_id"]) == ("nightly-report", failed.run.id)
