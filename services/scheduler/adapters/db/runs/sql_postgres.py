"""The runs repository's hand-written PostgreSQL: the planner settings of a claim and the
one-statement settle (`Settle._write_owned_pg`)."""

from __future__ import annotations

import sqlalchemy as sa

from scheduler.adapters.db.outbox_rows import OUTBOX_COLUMNS

# The same runs as DUE_STATUSES_SQL (the six statuses are a closed set), written so PostgreSQL
# cannot prove ix_runs_due's predicate from it: the claim's per-row re-check must go through the
# primary key. With stale statistics (right after a burst of new due runs) the planner otherwise
# chose ix_runs_due for it and scanned every due run once per claimed run (measured: 4,100 rows
# filtered per run, 80 ms per claim of 78 runs during a 10,000-run burst).
# SET LOCAL for both in one round trip (is_local = true: this transaction only).
INDEX_PATHS_ONLY = sa.text(
    "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)"
)


# The settle write on PostgreSQL, one round trip: `locked` locks the runs still leased to the
# completion's owner, in id order (no deadlock with another settle or a lease extension);
# `written` stores their state (its WHERE re-checks the lease on the newest row version);
# attempts and outbox rows are inserted for the written runs only, in completion order; `reset`
# is the breaker's all-succeeded case (on SQLite `Settle._reset_consecutive_failures`).
# Data-modifying CTEs always run to completion, whether or not the final SELECT reads them.
WRITE_OWNED = sa.text(
    """
WITH v AS (
  SELECT * FROM unnest(
    CAST(:r_id AS text[]), CAST(:r_owner AS text[]), CAST(:r_status AS text[]),
    CAST(:r_skip_reason AS text[]), CAST(:r_attempt_count AS int[]),
    CAST(:r_next_attempt_at AS timestamptz[]), CAST(:r_started_at AS timestamptz[]),
    CAST(:r_finished_at AS timestamptz[]), CAST(:r_lease_owner AS text[]),
    CAST(:r_lease_expires_at AS timestamptz[])
  ) AS v(id, owner, status, skip_reason, attempt_count, next_attempt_at, started_at,
         finished_at, lease_owner, lease_expires_at)
),
locked AS (
  SELECT runs.id FROM runs JOIN v ON v.id = runs.id
  WHERE runs.status = 'in_progress' AND runs.lease_owner = v.owner
  ORDER BY runs.id
  FOR UPDATE OF runs
),
written AS (
  UPDATE runs SET status = v.status, skip_reason = v.skip_reason,
    attempt_count = v.attempt_count, next_attempt_at = v.next_attempt_at,
    started_at = v.started_at, finished_at = v.finished_at, lease_owner = v.lease_owner,
    lease_expires_at = v.lease_expires_at
  FROM v
  WHERE runs.id = v.id AND runs.id IN (SELECT id FROM locked)
    AND runs.status = 'in_progress' AND runs.lease_owner = v.owner
  RETURNING runs.id, runs.schedule_id, runs.status
),
attempts_in AS (
  INSERT INTO delivery_attempts (run_id, number, started_at, duration_ms, status_code,
    error_kind, error_message, response_excerpt)
  SELECT a.run_id, a.number, a.started_at, a.duration_ms, a.status_code, a.error_kind,
    a.error_message, a.response_excerpt
  FROM unnest(
    CAST(:a_run_id AS text[]), CAST(:a_number AS int[]), CAST(:a_started_at AS timestamptz[]),
    CAST(:a_duration_ms AS int[]), CAST(:a_status_code AS int[]), CAST(:a_error_kind AS text[]),
    CAST(:a_error_message AS text[]), CAST(:a_response_excerpt AS text[])
  ) AS a(run_id, number, started_at, duration_ms, status_code, error_kind, error_message,
         response_excerpt)
  WHERE a.run_id IN (SELECT id FROM written)
),
events_in AS (
  INSERT INTO outbox (event_id, topic, key, type, payload, created_at)
  SELECT e.event_id, e.topic, e.key, e.type, e.payload, e.created_at
  FROM unnest(
    CAST(:e_run_id AS text[]), CAST(:e_event_id AS text[]), CAST(:e_topic AS text[]),
    CAST(:e_key AS text[]), CAST(:e_type AS text[]), CAST(:e_payload AS text[]),
    CAST(:e_created_at AS timestamptz[])
  ) WITH ORDINALITY AS e(run_id, event_id, topic, key, type, payload, created_at, n)
  WHERE e.run_id IN (SELECT id FROM written)
  ORDER BY e.n
  ON CONFLICT DO NOTHING
),
reset AS (
  UPDATE schedules SET consecutive_failures = 0
  WHERE schedules.id IN (
    SELECT s.id FROM schedules s
    WHERE s.id IN (SELECT schedule_id FROM written WHERE status = 'succeeded')
      AND s.id NOT IN (SELECT schedule_id FROM written WHERE status = 'failed')
      AND s.consecutive_failures > 0
    ORDER BY s.id
    FOR UPDATE
  ) AND schedules.consecutive_failures > 0
)
SELECT id FROM written
"""
)
RUN_PARAMS = tuple(
    "r_" + c
    for c in (
        "id",
        "owner",
        "status",
        "skip_reason",
        "attempt_count",
        "next_attempt_at",
        "started_at",
        "finished_at",
        "lease_owner",
        "lease_expires_at",
    )
)
ATTEMPT_PARAMS = tuple(
    "a_" + c
    for c in (
        "run_id",
        "number",
        "started_at",
        "duration_ms",
        "status_code",
        "error_kind",
        "error_message",
        "response_excerpt",
    )
)
EVENT_PARAMS = ("e_run_id", *("e_" + c for c in OUTBOX_COLUMNS))
