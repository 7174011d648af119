"""Envelope helpers, the consumer-side id memory and the bus factory."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from eventbus import (
    EnvelopeError,
    InProcessBus,
    KafkaConsumer,
    KafkaPublisher,
    SeenIds,
    decode,
    encode,
    envelope,
    make_consumer,
    make_publisher,
    parse_time,
)

ADDIS = timezone(timedelta(hours=3))


def sample() -> dict[str, object]:
    return envelope(
        id="evt_1",
        type="schedule.triggered",
        tenant_id="t1",
        time=datetime(2026, 3, 8, 3, 0, tzinfo=ADDIS),
        data={"report": "daily", "ünï": "cödé"},
        schedule_id="sch_1",
        scheduled_for=datetime(2026, 3, 8, 0, 0, tzinfo=UTC),
    )


def test_envelope_round_trips_times_written_in_utc_with_z() -> None:
    value = sample()

    decoded = decode(encode(value))

    assert decoded == value
    assert decoded["time"] == "2026-03-08T00:00:00Z"  # given at +03:00, written in UTC
    assert decoded["scheduled_for"] == "2026-03-08T00:00:00Z"
    assert parse_time(decoded["time"]) == datetime(2026, 3, 8, 0, 0, tzinfo=UTC)


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="offset"):
        envelope(id="e", type="x", tenant_id="t", time=datetime(2026, 1, 1), data={})
    # Envelopes written with an explicit offset (older producers) are still read.
    assert parse_time("2026-03-08T03:00:00+03:00") == datetime(2026, 3, 8, 0, 0, tzinfo=UTC)
    with pytest.raises(EnvelopeError, match="offset"):
        parse_time("2026-01-01T00:00:00")


def test_encode_refuses_oversized_and_non_json_values() -> None:
    with pytest.raises(EnvelopeError, match="limit"):
        encode({"data": "x" * 100}, max_bytes=50)
    with pytest.raises(EnvelopeError, match="JSON"):
        encode({"data": float("nan")})


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"x" * 101, "limit"),
        (b"\xff\xfe", "UTF-8 JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"id": "e", "type": "x", "tenant_id": "t", "time": "2026-01-01T00:00:00Z"}', "data"),
        (
            b'{"id": "", "type": "x", "tenant_id": "t", "time": "2026-01-01T00:00Z", "data": {}}',
            "id",
        ),
        (b'{"id": "e", "type": "x", "tenant_id": "t", "time": "soon", "data": {}}', "RFC 3339"),
        (b'{"id": "e", "type": "x", "tenant_id": "t", "time": "2026-01-01", "data": []}', "object"),
    ],
)
def test_decode_says_what_is_wrong(raw: bytes, reason: str) -> None:
    with pytest.raises(EnvelopeError, match=reason):
        decode(raw, max_bytes=100)


def test_decode_without_envelope_checks_only_the_json_object() -> None:
    assert decode(json.dumps({"tenant_id": "t"}).encode(), require_envelope=False) == {
        "tenant_id": "t"
    }


def test_seen_ids_reports_duplicates_and_forgets_the_least_recently_seen() -> None:
    seen = SeenIds(capacity=2)
    assert seen.add("a") is True
    assert seen.add("b") is True
    assert seen.add("a") is False  # duplicate; also makes "a" the most recent
    assert seen.add("c") is True  # evicts "b", the least recently seen

    assert "a" in seen
    assert "c" in seen
    assert "b" not in seen
    assert len(seen) == 2


def test_factory_picks_kafka_only_when_bootstrap_servers_are_set() -> None:
    bus = InProcessBus()
    assert not isinstance(make_publisher(None, bus, idempotent=True), KafkaPublisher)
    assert not isinstance(make_consumer("", bus, ["t"], "g"), KafkaConsumer)
    # Building Kafka clients does not connect, so no broker is needed here.
    assert isinstance(make_publisher("127.0.0.1:9", None, idempotent=False), KafkaPublisher)
    assert isinstance(make_consumer("127.0.0.1:9", None, ["t"], "g"), KafkaConsumer)
    with pytest.raises(ValueError, match="in-process bus"):
        make_publisher(None, None, idempotent=True)
