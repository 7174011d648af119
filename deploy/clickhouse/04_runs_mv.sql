-- The transform from envelope to row, run by ClickHouse for every block read from Kafka. Only
-- terminal run events; every other type on the topic (schedule.created, schedule.triggered, ...)
-- is ignored. Times in the envelope are RFC 3339 UTC with `Z`.
CREATE MATERIALIZED VIEW IF NOT EXISTS run_analytics.runs_mv TO run_analytics.runs AS
SELECT
    JSONExtractString(raw, 'id') AS event_id,
    parseDateTime64BestEffort(JSONExtractString(raw, 'time'), 6, 'UTC') AS event_time,
    JSONExtractString(raw, 'tenant_id') AS tenant_id,
    JSONExtractString(raw, 'schedule_id') AS schedule_id,
    JSONExtractString(raw, 'run_id') AS run_id,
    JSONExtractString(raw, 'data', 'trigger') AS trigger,
    JSONExtractString(raw, 'data', 'status') AS status,
    toUInt16(JSONExtractUInt(raw, 'data', 'attempt_count')) AS attempt_count,
    JSONExtractString(raw, 'data', 'last_error', 'kind') AS error_kind,
    coalesce(
        JSONExtract(raw, 'data', 'status_code', 'Nullable(UInt16)'),
        JSONExtract(raw, 'data', 'last_error', 'status_code', 'Nullable(UInt16)')
    ) AS status_code,
    JSONExtractString(raw, 'data', 'skip_reason') AS skip_reason,
    JSONExtractString(raw, 'data', 'endpoint') AS endpoint,
    parseDateTime64BestEffort(JSONExtractString(raw, 'scheduled_for'), 6, 'UTC') AS scheduled_for,
    -- Events written before due_at existed have none: their runs were due at scheduled_for.
    coalesce(
        parseDateTime64BestEffortOrNull(JSONExtractString(raw, 'data', 'due_at'), 6, 'UTC'),
        scheduled_for
    ) AS due_at,
    parseDateTime64BestEffortOrNull(JSONExtractString(raw, 'data', 'first_attempt_at'), 6, 'UTC')
        AS first_attempt_at,
    parseDateTime64BestEffort(JSONExtractString(raw, 'data', 'finished_at'), 6, 'UTC')
        AS finished_at,
    dateDiff('millisecond', due_at, first_attempt_at) AS lag_ms,
    toUInt32(JSONExtractUInt(raw, 'data', 'delivery_ms')) AS delivery_ms
FROM run_analytics.schedule_events_queue
WHERE length(_error) = 0
  AND JSONExtractString(raw, 'type')
      IN ('schedule.run.succeeded', 'schedule.run.failed', 'schedule.run.skipped');
