-- Success rate and scheduling lag per schedule per UTC day. Parameters: {from} and {to}
-- (scheduled_for range, UTC), {tenant_id} ('' = every tenant, for operators; a tenant-facing
-- report always passes the tenant). success_rate leaves skipped runs out (a skip is a policy,
-- not a failure); lag percentiles count planned runs only (a manual run is due when asked).
SELECT
    tenant_id,
    schedule_id,
    toDate(scheduled_for) AS day,
    count() AS runs,
    countIf(status = 'succeeded') AS succeeded,
    countIf(status = 'failed') AS failed,
    countIf(status = 'skipped') AS skipped,
    if(succeeded + failed = 0, NULL, round(succeeded / (succeeded + failed), 4)) AS success_rate,
    quantileExactIf(0.5)(lag_ms, trigger = 'schedule' AND lag_ms IS NOT NULL) AS lag_p50_ms,
    quantileExactIf(0.99)(lag_ms, trigger = 'schedule' AND lag_ms IS NOT NULL) AS lag_p99_ms
FROM run_analytics.runs FINAL
WHERE scheduled_for >= {from:DateTime64(6, 'UTC')}
  AND scheduled_for < {to:DateTime64(6, 'UTC')}
  AND ({tenant_id:String} = '' OR tenant_id = {tenant_id:String})
GROUP BY tenant_id, schedule_id, day
ORDER BY tenant_id, schedule_id, day;
