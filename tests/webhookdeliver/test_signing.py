"""The signature scheme: known answers, round trips, rotation, tolerance, tampering, interop."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

import webhookdeliver as wd
from webhookdeliver.headers import build_headers

TS = 1_767_225_600
BODY = b'{"schedule_id":"sch_1","n":1}'


def headers_for(secrets: list[str], body: bytes = BODY, ts: int = TS, wid: str = "run_1"):
    return build_headers(
        secrets=secrets,
        webhook_id=wid,
        event_type="schedule.triggered",
        attempt=1,
        timestamp=ts,
        body=body,
        user_agent="t",
    )


def test_sign_known_answer():
    # Independent computation of DESIGN.md §8: key = whole secret as UTF-8, msg = id.ts.body.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    want = hmac.new(secret.encode(), b"msg_1.1700000000." + BODY, hashlib.sha256).hexdigest()
    assert wd.sign(secret, "msg_1", 1700000000, BODY) == f"sha256={want}"
    assert want == want.lower()
    assert len(want) == 64


def test_signature_header_lists_every_secret_in_order():
    a, b = wd.generate_secret(), wd.generate_secret()
    value = wd.signature_header([a, b], "w", TS, BODY)
    assert value == f"{wd.sign(a, 'w', TS, BODY)}, {wd.sign(b, 'w', TS, BODY)}"
    with pytest.raises(ValueError):
        wd.signature_header([], "w", TS, BODY)


def test_generated_secrets_are_whsec_32_random_bytes():
    secrets = {wd.generate_secret() for _ in range(50)}
    assert len(secrets) == 50
    for secret in secrets:
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32


@settings(max_examples=50, deadline=None)
@given(
    body=st.binary(max_size=2048),
    wid=st.text(min_size=1, max_size=40),
    skew=st.integers(min_value=-300, max_value=300),
)
def test_round_trip_within_tolerance(body, wid, skew):
    secret = wd.generate_secret()
    headers = headers_for([secret], body=body, wid=wid)
    assert wd.verify([secret], headers, body, now=TS + skew)


def test_rotation_either_secret_verifies_and_a_stranger_does_not():
    new, old, stranger = wd.generate_secret(), wd.generate_secret(), wd.generate_secret()
    headers = headers_for([new, old])
    assert wd.verify([new], headers, BODY, now=TS)
    assert wd.verify([old], headers, BODY, now=TS)
    assert wd.verify([stranger, old], headers, BODY, now=TS)
    assert not wd.verify([stranger], headers, BODY, now=TS)
    assert not wd.verify([], headers, BODY, now=TS)


@pytest.mark.parametrize("skew", [-301, 301, -10_000, 10_000])
def test_timestamps_outside_tolerance_are_refused_both_ways(skew):
    secret = wd.generate_secret()
    assert not wd.verify([secret], headers_for([secret]), BODY, now=TS + skew)
    assert wd.verify(
        [secret], headers_for([secret]), BODY, now=TS + skew, tolerance_seconds=abs(skew)
    )


def _only_x(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if not k.startswith("webhook-")}


def _only_standard(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if not k.startswith("X-")}


@pytest.mark.parametrize("scheme", [_only_x, _only_standard])
def test_tampering_is_detected_in_each_scheme(scheme):
    secret = wd.generate_secret()
    good = scheme(headers_for([secret]))
    assert wd.verify([secret], good, BODY, now=TS)
    assert not wd.verify([secret], good, BODY + b" ", now=TS)
    assert not wd.verify([secret], good, BODY[:-1], now=TS)
    for key in list(good):
        if key.lower() in ("x-timestamp", "webhook-timestamp"):
            assert not wd.verify([secret], {**good, key: str(TS + 1)}, BODY, now=TS)
        if key.lower() in ("x-webhook-id", "webhook-id"):
            assert not wd.verify([secret], {**good, key: "run_2"}, BODY, now=TS)
    stripped = {
        k: v for k, v in good.items() if k.lower() not in ("x-signature", "webhook-signature")
    }
    assert not wd.verify([secret], stripped, BODY, now=TS)


def test_header_names_are_case_insensitive():
    secret = wd.generate_secret()
    for transform in (str.lower, str.upper, str.title):
        headers = {transform(k): v for k, v in _only_x(headers_for([secret])).items()}
        assert wd.verify([secret], headers, BODY, now=TS)


@pytest.mark.parametrize(
    "bad_ts", ["", "-1767225600", "1767225600.0", "1e9", " ", "17672256000000000", "٣"]
)
def test_malformed_timestamps_are_refused(bad_ts):
    secret = wd.generate_secret()
    headers = {**_only_x(headers_for([secret])), "X-Timestamp": bad_ts}
    assert not wd.verify([secret], headers, BODY, now=TS)


def test_oversized_or_garbage_signature_headers_are_refused():
    secret = wd.generate_secret()
    good = _only_x(headers_for([secret]))
    assert not wd.verify([secret], {**good, "X-Signature": "sha256=" + "0" * 64}, BODY, now=TS)
    padded = "x, " * 2000 + good["X-Signature"]
    assert not wd.verify([secret], {**good, "X-Signature": padded}, BODY, now=TS)
    assert not wd.verify([secret], {**good, "X-Signature": "sha256=é"}, BODY, now=TS)


def test_verify_compares_with_hmac_compare_digest(monkeypatch):
    # Constant-time comparison: verify must route every digest comparison through it.
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    secret = wd.generate_secret()
    assert wd.verify([secret], _only_x(headers_for([secret])), BODY, now=TS)
    assert calls
    assert all(isinstance(a, bytes) for a, _ in calls)


def test_standard_webhooks_library_verifies_our_headers():
    # The reference library reads the real clock, so sign with the real current time.
    new, old = wd.generate_secret(), wd.generate_secret()
    now = int(time.time())
    headers = headers_for([new, old], ts=now)
    for secret in (new, old):
        assert Webhook(secret).verify(BODY, headers) == {"schedule_id": "sch_1", "n": 1}
    with pytest.raises(WebhookVerificationError):
        Webhook(wd.generate_secret()).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new).verify(BODY + b" ", headers)


def test_we_verify_the_standard_webhooks_library_signature():
    secret = wd.generate_secret()
    signature = Webhook(secret).sign("msg_9", datetime.fromtimestamp(TS, UTC), BODY.decode())
    headers = {"webhook-id": "msg_9", "webhook-timestamp": str(TS), "webhook-signature": signature}
    assert wd.verify([secret], headers, BODY, now=TS)
    assert wd.standard_webhooks_signature([secret], "msg_9", TS, BODY) == signature
