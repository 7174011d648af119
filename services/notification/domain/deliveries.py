"""Delivery states and the endpoint-health rule. Pure, no I/O.

A delivery is one event for one subscription. Attempts are appended to it; it ends `succeeded`
or `dead` (the dead-letter state: retries exhausted or a non-retryable answer). A replay puts a
dead or succeeded delivery back to `pending` with a fresh retry budget, same `X-Webhook-Id`.
Deleting a subscription ends its unfinished deliveries `dead` with `SUBSCRIPTION_DELETED_ERROR`
(nothing would ever attempt them again).

Lost attempts (as the scheduler's runs count them): a dispatcher that dies, or stops renewing its
lease, after claiming a delivery may have sent its attempt. The claim that takes the expired
lease over counts that attempt (`attempt_count` and the round's count + 1) and records it with
`error_kind = LOST_ATTEMPT_KIND`, started when the lost claim was made (as far as the store can
tell: its lease's expiry minus the lease length, a renewal moving it later), so the next attempt
goes out with the next `X-Attempt` and the attempt log shows what the receiver may have seen. A
lost attempt counts toward the retry budget like any other: when it was the round's last,
`lost_attempt_outcome` ends the delivery dead at the take-over, not attempted once more (a
delivery that takes its dispatcher down would otherwise be retried for ever). It is not the
endpoint's failure: the health streak ignores it.

Endpoint health (the choice, after Svix): Svix disables an endpoint when every attempt to it
has failed for 5 days; Stripe emails the account and disables an endpoint after several days of
failures. We follow Svix: an endpoint is *failing since* its first failed attempt after its last
success; when an attempt fails and the endpoint has been failing for at least
`disable_after_seconds` (default 5 days) with at least `min_consecutive_failures` failed attempts
(so one stray failure after a quiet week does not disable it), the subscription is disabled and
the tenant is alerted (in-app and email). Any success clears the streak. Re-enabling is a PATCH.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    """Waiting for its first attempt (or its first after a replay)."""
    RETRYING = "retrying"
    """Failed at least once; the next attempt is due at `next_attempt_at`."""
    SUCCEEDED = "succeeded"
    """A 2xx arrived."""
    DEAD = "dead"
    """Dead letter: retries exhausted or not retryable. Replayable."""


DUE_STATES = (DeliveryStatus.PENDING, DeliveryStatus.RETRYING)
LOST_ATTEMPT_KIND = "worker_lost"
"""The error kind of an attempt whose dispatcher was lost before it recorded the outcome."""
LOST_ATTEMPT_MESSAGE = (
    "the dispatcher making this attempt stopped renewing its lease (it crashed or lost the "
    "database); whether the request reached the target is unknown"
)
SUBSCRIPTION_DELETED_ERROR = (
    "subscription_deleted: the subscription was deleted before this delivery succeeded"
)


@dataclass(frozen=True)
class EndpointHealthPolicy:
    disable_after_seconds: float = 5 * 24 * 3600
    min_consecutive_failures: int = 3

    def should_disable(
        self, failing_since: datetime | None, consecutive_failures: int, now: datetime
    ) -> bool:
        if failing_since is None:
            return False
        return (
            consecutive_failures >= self.min_consecutive_failures
            and now - failing_since >= timedelta(seconds=self.disable_after_seconds)
        )


@dataclass(frozen=True)
class EndpointHealth:
    """The failure streak of one subscription's endpoint, after one more attempt."""

    failing_since: datetime | None
    consecutive_failures: int


@dataclass(frozen=True)
class StreakChange:
    """What a group of attempts to one endpoint does to its streak, whatever the streak was:
    `failures` failed attempts after the group's last success (all of them if none succeeded),
    the first of them at `first_failure_at`; `restarts` when a success in the group ended any
    earlier streak (the count starts over instead of adding up)."""

    subscription_id: str
    failures: int
    first_failure_at: datetime | None
    restarts: bool

    @property
    def clears(self) -> bool:
        """The group ends on a success: the endpoint is healthy."""
        return self.restarts and self.failures == 0

    def applied_to(self, prior: EndpointHealth) -> EndpointHealth:
        if self.restarts:
            return EndpointHealth(self.first_failure_at, self.failures)
        return EndpointHealth(
            prior.failing_since or self.first_failure_at,
            prior.consecutive_failures + self.failures,
        )


def streak_changes(attempts: Iterable[tuple[str, bool, datetime]]) -> list[StreakChange]:
    """Per endpoint (subscription id), the change made by its `(id, ok, started_at)` attempts,
    applied in start order."""
    changes: dict[str, StreakChange] = {}
    for sub_id, ok, started_at in sorted(attempts, key=lambda a: a[2]):
        c = changes.get(sub_id) or StreakChange(sub_id, 0, None, False)
        if ok:
            changes[sub_id] = StreakChange(sub_id, 0, None, True)
        else:
            changes[sub_id] = StreakChange(
                sub_id, c.failures + 1, c.first_failure_at or started_at, c.restarts
            )
    return list(changes.values())


NextDelay = Callable[[int, float, float | None], float | None]
"""The backoff: `(attempt number in the round, seconds since the round began, Retry-After)` ->
seconds until the next attempt, or None when the round's attempts are spent."""


@dataclass(frozen=True)
class DeliveryOutcome:
    """The state one attempt leaves a delivery in."""

    status: DeliveryStatus
    """SUCCEEDED, RETRYING or DEAD."""
    next_attempt_at: datetime | None
    """When RETRYING: the next attempt's time."""
    round_started_at: datetime
    """The retry round's start (kept; the attempt's start for the round's first attempt)."""


def delivery_outcome(
    *,
    ok: bool,
    retryable: bool,
    retry_after_seconds: float | None,
    round_attempts: int,
    round_started_at: datetime | None,
    started_at: datetime,
    now: datetime,
    next_delay: NextDelay,
) -> DeliveryOutcome:
    """Decide what one attempt leads to: a 2xx succeeded; a retryable failure retrying at the
    backoff's delay while the round (`round_attempts` before this one, begun at
    `round_started_at`) has attempts and time left; anything else dead (the dead letter)."""
    round_started = round_started_at or started_at
    if ok:
        return DeliveryOutcome(DeliveryStatus.SUCCEEDED, None, round_started)
    delay = None
    if retryable:
        elapsed = (now - round_started).total_seconds()
        delay = next_delay(round_attempts + 1, elapsed, retry_after_seconds)
    if delay is None:
        return DeliveryOutcome(DeliveryStatus.DEAD, None, round_started)
    return DeliveryOutcome(DeliveryStatus.RETRYING, now + timedelta(seconds=delay), round_started)


def lost_attempt_outcome(
    *,
    round_attempts: int,
    round_started_at: datetime,
    now: datetime,
    next_delay: NextDelay,
) -> DeliveryOutcome | None:
    """After a take-over counted a lost attempt (`round_attempts` includes it): None to attempt
    again now (the delivery was due before its lease ran out), or the dead outcome when the lost
    attempt was the round's last."""
    outcome = delivery_outcome(
        ok=False,
        retryable=True,
        retry_after_seconds=None,
        round_attempts=round_attempts - 1,
        round_started_at=round_started_at,
        started_at=round_started_at,
        now=now,
        next_delay=next_delay,
    )
    return outcome if outcome.status is DeliveryStatus.DEAD else None
