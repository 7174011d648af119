"""What one attempt leaves a delivery in (domain/deliveries.py `delivery_outcome`), pure."""

from datetime import UTC, datetime, timedelta

from notification.domain.deliveries import DeliveryStatus, delivery_outcome

T0 = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)


class Backoff:
    """Records what it was asked; answers `delay` (None: the round is spent)."""

    def __init__(self, delay: float | None) -> None:
        self.delay = delay
        self.asked: list[tuple[int, float, float | None]] = []

    def __call__(self, attempt: int, elapsed: float, retry_after: float | None) -> float | None:
        self.asked.append((attempt, elapsed, retry_after))
        return self.delay


def decide(backoff: Backoff, *, ok: bool = False, retryable: bool = True, **kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {
        "retry_after_seconds": None,
        "round_attempts": 0,
        "round_started_at": None,
        "started_at": T0,
        "now": T0 + timedelta(seconds=2),
        **kw,
    }
    return delivery_outcome(ok=ok, retryable=retryable, next_delay=backoff, **args)  # type: ignore[arg-type]


def test_a_2xx_succeeds_without_asking_the_backoff() -> None:
    backoff = Backoff(5.0)
    out = decide(backoff, ok=True)
    assert (out.status, out.next_attempt_at, out.round_started_at) == (
        DeliveryStatus.SUCCEEDED,
        None,
        T0,
    )
    assert backoff.asked == []


def test_a_retryable_failure_retries_at_the_backoffs_delay_within_its_round() -> None:
    backoff = Backoff(30.0)
    began = T0 - timedelta(minutes=10)
    out = decide(backoff, round_attempts=2, round_started_at=began, retry_after_seconds=7.0)
    assert out.status is DeliveryStatus.RETRYING
    assert out.next_attempt_at == T0 + timedelta(seconds=32)
    assert out.round_started_at == began  # the round goes on
    assert backoff.asked == [(3, 602.0, 7.0)]


def test_a_spent_round_or_a_non_retryable_answer_is_dead() -> None:
    assert decide(Backoff(None)).status is DeliveryStatus.DEAD
    backoff = Backoff(30.0)
    out = decide(backoff, retryable=False)
    assert (out.status, out.next_attempt_at) == (DeliveryStatus.DEAD, None)
    assert backoff.asked == []


def test_the_first_attempt_of_a_round_begins_it() -> None:
    out = decide(Backoff(1.0), started_at=T0 + timedelta(seconds=1))
    assert out.round_started_at == T0 + timedelta(seconds=1)
