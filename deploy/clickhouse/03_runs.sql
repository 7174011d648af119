-- One row per finished run (succeeded, failed or skipped), from its terminal event.
-- Events are delivered at least once: a redelivered event has the same sorting key and is
-- collapsed by ReplacingMergeTree (queries read FINAL, so a not-yet-merged duplicate never counts
-- twice). due_at = scheduled_for plus the schedule's jitter; lag_ms = first attempt start - due_at
-- (NULL when never attempted), what scheduler_run_lag_seconds measures; delivery_ms =
-- the attempts' durations summed; endpoint = the webhook's host:port ('' for event actions and
-- runs skipped before a claim).
CREATE TABLE IF NOT EXISTS run_analytics.runs
(
    event_id String,
    event_time DateTime64(6, 'UTC'),
    tenant_id LowCardinality(String),
    schedule_id String,
    run_id String,
    trigger LowCardinality(String),
    status LowCardinality(String),
    attempt_count UInt16,
    error_kind LowCardinality(String),
    status_code Nullable(UInt16),
    skip_reason LowCardinality(String),
    endpoint LowCardinality(String),
    scheduled_for DateTime64(6, 'UTC'),
    due_at DateTime64(6, 'UTC'),
    first_attempt_at Nullable(DateTime64(6, 'UTC')),
    finished_at DateTime64(6, 'UTC'),
    lag_ms Nullable(Int64),
    delivery_ms UInt32
)
ENGINE = ReplacingMergeTree(event_time)
PARTITION BY toYYYYMM(scheduled_for)
ORDER BY (tenant_id, schedule_id, scheduled_for, run_id)
-- Longer than the scheduler keeps runs (SCHEDULER_RUN_RETENTION_DAYS, 90): this is the history.
TTL toDateTime(scheduled_for) + INTERVAL 400 DAY;
