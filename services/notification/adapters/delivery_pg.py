"""The dispatcher's hot statements on PostgreSQL, on asyncpg directly (so the hot path pays
no ORM cost per row): the claim and the completion write. Each SQL text is constant (arrays, not
expanded lists), so asyncpg prepares it once per connection; rows map straight to the domain's
records (no SQLAlchemy compile, type processing or greenlet switch per row). They run inside
the store's unit of work (`servicekit.data.database.asyncpg_connection`): same transaction, bounds,
commit and rollback as its SQLAlchemy statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from notification.adapters.sql_store import SUBSCRIPTION_COLUMNS, subscription_record
from notification.adapters.tables import DUE_STATUSES_SQL
from notification.domain.deliveries import (
    LOST_ATTEMPT_KIND,
    LOST_ATTEMPT_MESSAGE,
    DeliveryStatus,
    EndpointHealth,
)
from notification.service_layer.ports import (
    ClaimedDelivery,
    DeliveryCompletion,
    SubscriptionRecord,
)
from servicekit.data.database import CLAIM_PLANNER_SQL

TERMINAL = (DeliveryStatus.SUCCEEDED.value, DeliveryStatus.DEAD.value)

# For the claim's transaction only: walk the due index in order and look subscriptions up by
# primary key (servicekit.data.database.CLAIM_PLANNER_SQL says why).
CLAIM_PLANNER = CLAIM_PLANNER_SQL


# $1 owner, $2 now, $3 lease_until, $4 limit, then `CLAIM_LOST_ARGS`. Oldest due first, locked
# with SKIP LOCKED so that replicas take disjoint deliveries; each returned with its (live,
# enabled) subscription. A delivery still holding an owner had its lease expire unfinished (a
# completion or a release clears the owner): its lost attempt is counted and recorded here, in
# the claim's transaction, started at the lost claim's time (its lease's expiry minus this
# claim's lease length; domain/deliveries.py "Lost attempts").
CLAIM = f"""
WITH picked AS (
  SELECT d.id, d.lease_owner IS NOT NULL AS lost,
    d.lease_expires_at - ($3::timestamptz - $2::timestamptz) AS lost_started_at
  FROM webhook_deliveries d JOIN subscriptions s ON s.id = d.subscription_id
  WHERE d.{DUE_STATUSES_SQL} AND d.next_attempt_at <= $2
    AND (d.lease_expires_at IS NULL OR d.lease_expires_at < $2)
    AND s.enabled IS true AND s.deleted_at IS NULL
  ORDER BY d.next_attempt_at
  LIMIT $4
  FOR UPDATE OF d SKIP LOCKED
),
claimed AS (
  UPDATE webhook_deliveries d SET lease_owner = $1, lease_expires_at = $3,
    attempt_count = d.attempt_count + picked.lost::int,
    round_attempts = d.round_attempts + picked.lost::int,
    round_started_at = CASE WHEN picked.lost
      THEN coalesce(d.round_started_at, picked.lost_started_at) ELSE d.round_started_at END,
    last_error = CASE WHEN picked.lost THEN $5 ELSE d.last_error END,
    updated_at = CASE WHEN picked.lost THEN $2 ELSE d.updated_at END
  FROM picked WHERE d.id = picked.id
  RETURNING d.id, d.subscription_id, d.event_type, d.body, d.attempt_count, d.round_attempts,
    d.round_started_at, picked.lost, picked.lost_started_at
),
lost_in AS (
  INSERT INTO delivery_attempts (delivery_id, number, started_at, duration_ms, error_kind,
    error_message)
  SELECT id, attempt_count, lost_started_at, 0, $6, $7 FROM claimed WHERE lost
)
SELECT c.id AS d_id, c.event_type, c.body, c.attempt_count, c.round_attempts,
  c.round_started_at, c.lost, {", ".join(f"s.{c.name}" for c in SUBSCRIPTION_COLUMNS)}
FROM claimed c JOIN subscriptions s ON s.id = c.subscription_id
"""  # noqa: S608 (constants only)
# $5 the delivery's last_error, $6 the attempt's error_kind, $7 its error_message.
CLAIM_LOST_ARGS = (
    f"{LOST_ATTEMPT_KIND}: {LOST_ATTEMPT_MESSAGE}",
    LOST_ATTEMPT_KIND,
    LOST_ATTEMPT_MESSAGE,
)


def claimed_of(rows: Sequence[Any]) -> list[ClaimedDelivery]:
    """The claim's rows as `ClaimedDelivery`s; one `SubscriptionRecord` per subscription
    (asyncpg returns aware UTC datetimes for timestamptz; the dialect's codec decodes JSON)."""
    subs: dict[str, SubscriptionRecord] = {}
    out: list[ClaimedDelivery] = []
    for r in rows:
        sub = subs.get(r["id"])
        if sub is None:
            sub = subs[r["id"]] = subscription_record(r)
        out.append(
            ClaimedDelivery(
                id=r["d_id"],
                tenant_id=r["tenant_id"],
                event_type=r["event_type"],
                body=r["body"],
                attempt_count=r["attempt_count"],
                round_attempts=r["round_attempts"],
                round_started_at=r["round_started_at"],
                subscription=sub,
                lost_attempt=r["lost"],
            )
        )
    return out


# The completion write, one round trip: the deliveries and their attempts, then the endpoint
# health rows the streak rule needs. $1-$14 one array per completion column (id order),
# $15 now, $16 the batch's subscriptions, $17 those with a failed attempt in the batch.
# `locked` locks, in id order, the deliveries still due and leased to the completion's owner,
# probing the primary key with the batch's ids (joined on v alone, a planner may read every
# leased delivery through the due index instead); `written` stores their state (its WHERE
# re-checks the lease on the newest row version); attempts are inserted for the written
# deliveries only, so an attempt number can never be written twice (a completion without an
# attempt, a delivery ended at a take-over, writes the state alone: null number).
# `health` then locks, in id order, the subscriptions whose streak may change: those with a
# failed attempt and those not clear (a success on a clear endpoint changes
# nothing, so the common case locks no subscription). The result's `written` rows come first
# (UNION ALL runs its branches in order: deliveries are locked before subscriptions, as in the
# SQLite path); `w` tells the two kinds apart.
COMPLETE = f"""
WITH v AS (
  SELECT * FROM unnest(
    $1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[],
    $7::timestamptz[], $8::int[], $9::timestamptz[], $10::int[], $11::int[], $12::text[],
    $13::text[], $14::text[]
  ) AS v(id, owner, status, next_attempt_at, round_started_at, last_error, finished_at,
         number, started_at, duration_ms, status_code, error_kind, error_message,
         response_excerpt)
),
locked AS (
  SELECT d.id FROM webhook_deliveries d JOIN v ON v.id = d.id
  WHERE d.id = ANY($1::text[]) AND d.lease_owner = v.owner AND d.{DUE_STATUSES_SQL}
  ORDER BY d.id
  FOR UPDATE OF d
),
written AS (
  UPDATE webhook_deliveries d SET status = v.status,
    attempt_count = d.attempt_count + (v.number IS NOT NULL)::int,
    round_attempts = d.round_attempts + (v.number IS NOT NULL)::int,
    round_started_at = v.round_started_at,
    next_attempt_at = v.next_attempt_at, lease_owner = NULL, lease_expires_at = NULL,
    last_error = v.last_error, updated_at = $15, finished_at = v.finished_at
  FROM v
  WHERE d.id = v.id AND d.id IN (SELECT id FROM locked)
    AND d.lease_owner = v.owner AND d.{DUE_STATUSES_SQL}
  RETURNING d.id
),
attempts_in AS (
  INSERT INTO delivery_attempts (delivery_id, number, started_at, duration_ms, status_code,
    error_kind, error_message, response_excerpt)
  SELECT v.id, v.number, v.started_at, v.duration_ms, v.status_code, v.error_kind,
    v.error_message, v.response_excerpt
  FROM v WHERE v.id IN (SELECT id FROM written) AND v.number IS NOT NULL
)
SELECT true AS w, id, NULL::timestamptz AS failing_since, NULL::int AS consecutive_failures
FROM written
UNION ALL
SELECT false, id, failing_since, consecutive_failures FROM (
  SELECT s.id, s.failing_since, s.consecutive_failures FROM subscriptions s
  WHERE s.id = ANY($16::text[])
    AND (s.id = ANY($17::text[]) OR s.consecutive_failures > 0 OR s.failing_since IS NOT NULL)
  ORDER BY s.id
  FOR UPDATE OF s
) health
"""  # noqa: S608 (constants only)

# $1 ids, $2 failing_since, $3 consecutive_failures: the streaks that changed.
UPDATE_STREAKS = """
UPDATE subscriptions s SET failing_since = u.failing_since,
  consecutive_failures = u.consecutive_failures
FROM unnest($1::text[], $2::timestamptz[], $3::int[])
  AS u(id, failing_since, consecutive_failures)
WHERE s.id = u.id
"""


def complete_args(completions: Sequence[DeliveryCompletion], now: datetime) -> list[Any]:
    """`COMPLETE`'s parameters: the columns of the completions in id order (the lock order of
    every writer of deliveries, so two never wait on each other in a cycle)."""
    ordered = sorted(completions, key=lambda c: c.delivery_id)
    attempts = [c.attempt for c in ordered]
    return [
        [c.delivery_id for c in ordered],
        [c.owner for c in ordered],
        [c.status for c in ordered],
        [c.next_attempt_at for c in ordered],
        [c.round_started_at for c in ordered],
        [c.last_error for c in ordered],
        [now if c.status in TERMINAL else None for c in ordered],
        [None if a is None else a.number for a in attempts],
        [None if a is None else a.started_at for a in attempts],
        [None if a is None else a.duration_ms for a in attempts],
        [None if a is None else a.status_code for a in attempts],
        [None if a is None else a.error_kind for a in attempts],
        [None if a is None else a.error_message for a in attempts],
        [None if a is None else a.response_excerpt for a in attempts],
        now,
        # Only attempts move an endpoint's streak: an ended take-over leaves it alone.
        sorted({c.subscription_id for c in ordered if c.attempt is not None}),
        sorted({c.subscription_id for c in ordered if not c.ok and c.attempt is not None}),
    ]


def split_completed(rows: Sequence[Any]) -> tuple[set[str], dict[str, EndpointHealth]]:
    """`COMPLETE`'s rows: the written deliveries and the locked subscriptions' streaks."""
    written: set[str] = set()
    health: dict[str, EndpointHealth] = {}
    for r in rows:
        if r["w"]:
            written.add(r["id"])
        else:
            health[r["id"]] = EndpointHealth(r["failing_since"], r["consecutive_failures"])
    return written, health
