"""AttemptRecord.of: the one attempt shape of both services, bounds applied once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import webhookdeliver as wd
from webhookdeliver.attempts import bound_error_message, bound_excerpt, storable_text

T = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def result(**kw: object) -> wd.DeliveryResult:
    fields: dict[str, object] = {
        "ok": False,
        "status_code": 503,
        "error_kind": "http_status",
        "error_message": "HTTP 503",
        "duration_ms": 12.6,
        "response_excerpt": "busy",
        "retryable": True,
        "retry_after_seconds": 30.0,
        "started_at": T,
    }
    fields.update(kw)
    return wd.DeliveryResult(**fields)  # type: ignore[arg-type]


def test_a_failed_attempt_keeps_what_the_result_said() -> None:
    record = wd.AttemptRecord.of(3, result())
    assert record == wd.AttemptRecord(
        number=3,
        started_at=T,
        duration_ms=13,
        status_code=503,
        error_kind="http_status",
        error_message="HTTP 503",
        response_excerpt="busy",
        retry_after_seconds=30.0,
    )


def test_a_success_has_no_error_kind_and_empty_text_is_none() -> None:
    ok = wd.AttemptRecord.of(
        1, result(ok=True, status_code=200, error_kind=None, error_message="", response_excerpt="")
    )
    assert (ok.error_kind, ok.error_message, ok.response_excerpt) == (None, None, None)


def test_a_failure_without_a_kind_is_recorded_as_error() -> None:
    assert wd.AttemptRecord.of(1, result(error_kind=None)).error_kind == "error"


def test_long_texts_are_cut_to_the_shared_bounds() -> None:
    record = wd.AttemptRecord.of(1, result(error_message="e" * 2000, response_excerpt="é" * 2000))
    assert record.error_message is not None
    assert len(record.error_message) == wd.MAX_ERROR_MESSAGE_CHARS
    assert record.error_message.endswith("…")
    # 2 bytes a character: the 1 KiB cut never splits one.
    assert record.response_excerpt == "é" * (wd.MAX_EXCERPT_BYTES // 2)
    assert wd.bound_excerpt("x" * 10) == "x" * 10
    assert wd.bound_error_message("short") == "short"
    assert wd.truncate_utf8("aé", 2) == "a"


@pytest.mark.parametrize(
    "bad",
    [{"number": 0}, {"duration_ms": -1}, {"started_at": datetime(2026, 3, 2)}],
)
def test_impossible_records_are_refused(bad: dict[str, object]) -> None:
    fields: dict[str, object] = {
        "number": 1,
        "started_at": T,
        "duration_ms": 0,
        "status_code": None,
        "error_kind": None,
        "error_message": None,
        "response_excerpt": None,
    }
    fields.update(bad)
    with pytest.raises(ValueError):
        wd.AttemptRecord(**fields)  # type: ignore[arg-type]


async def test_a_real_delivery_becomes_a_record(start_receiver) -> None:  # type: ignore[no-untyped-def]
    receiver = await start_receiver()
    async with wd.Deliverer(allow_private_networks=True) as deliverer:
        delivered = await deliverer.deliver(
            wd.Delivery(
                url=receiver.url(),
                body=b"{}",
                secrets=["whsec_c2VjcmV0"],
                webhook_id="w",
                event_type="schedule.triggered",
                attempt=1,
            )
        )
    record = wd.AttemptRecord.of(1, delivered)
    assert (record.status_code, record.error_kind, record.response_excerpt) == (200, None, "ok")


def test_nul_never_reaches_a_stored_text() -> None:
    assert bound_excerpt("a\x00b") == "a\ufffdb"
    assert bound_error_message("boom\x00") == "boom\ufffd"
    assert storable_text("clean") == "clean"
