-- The endpoints (host:port) with the most failed runs finished in [{from}, {to}), with their
-- failure rate among finished runs, how many tenants deliver there and the commonest error
-- kinds. {tenant_id} ('' = every tenant) and {limit} as in the other queries.
SELECT
    endpoint,
    countIf(status = 'failed') AS failed_runs,
    count() AS finished_runs,
    round(failed_runs / finished_runs, 4) AS failure_rate,
    uniqExact(tenant_id) AS tenants,
    topKIf(3)(error_kind, status = 'failed') AS error_kinds
FROM run_analytics.runs FINAL
WHERE endpoint != ''
  AND status IN ('succeeded', 'failed')
  AND finished_at >= {from:DateTime64(6, 'UTC')}
  AND finished_at < {to:DateTime64(6, 'UTC')}
  AND ({tenant_id:String} = '' OR tenant_id = {tenant_id:String})
GROUP BY endpoint
HAVING failed_runs > 0
ORDER BY failed_runs DESC, endpoint
LIMIT {limit:UInt32};
