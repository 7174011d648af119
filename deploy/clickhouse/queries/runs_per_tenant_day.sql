-- Runs per tenant per UTC day (by scheduled_for) with their outcome, attempts and the time
-- spent delivering. The scheduler's own max_runs_per_day counts non-skipped runs: `counted`.
SELECT
    tenant_id,
    toDate(scheduled_for) AS day,
    count() AS runs,
    countIf(status != 'skipped') AS counted,
    countIf(status = 'succeeded') AS succeeded,
    countIf(status = 'failed') AS failed,
    countIf(status = 'skipped') AS skipped,
    sum(attempt_count) AS attempts,
    sum(delivery_ms) AS delivery_ms
FROM run_analytics.runs FINAL
WHERE scheduled_for >= {from:DateTime64(6, 'UTC')}
  AND scheduled_for < {to:DateTime64(6, 'UTC')}
  AND ({tenant_id:String} = '' OR tenant_id = {tenant_id:String})
GROUP BY tenant_id, day
ORDER BY tenant_id, day;
