"""The runs repository's hand-written PostgreSQL, run on asyncpg directly with positional
parameters (claims_pg.py, `Settle._settle_leased_pg`): the planner settings of a claim, the
tenant-fair choice of a claim and the one-statement settle."""

from __future__ import annotations

import re

from scheduler.adapters.db.outbox_rows import OUTBOX_COLUMNS
from scheduler.adapters.db.tables import DUE_RECHECK_SQL, LEASED_RECHECK_SQL, LIVE_DUE_SQL


def positional(sql: str, names: dict[str, str]) -> str:
    """`sql` with each `:name` replaced by its positional parameter (e.g. `$3::timestamptz`):
    the statements are written with names, for reading; asyncpg takes `$n`."""
    out = re.sub(r"(?<!:):([a-z_]+)\b", lambda m: names[m.group(1)], sql)
    return out


# The claim's planner settings (servicekit.data.database.CLAIM_PLANNER_SQL): index paths only,
# generic
# plans.
# DUE_RECHECK_SQL (the runs due in either lane, the six statuses being a closed set) is written so
# PostgreSQL cannot prove a due index's predicate from it: the claim's per-row re-check must go
# through the primary key. With stale statistics (right after a burst of new due runs) the
# planner otherwise chose the due index for it and scanned every due run once per claimed run
# (measured: 4,100 rows filtered per run, 80 ms per claim of 78 runs during a 10,000-run burst).


# The tenant-fair choice of a claim: the ids of up to :limit live due runs, locked (SKIP
# LOCKED), every due tenant's oldest before anyone's next, whatever the backlog. Bounded work per
# claim, all index probes of ix_runs_live_due(_tenant), never a scan of the due runs:
# - `start`: the tenant of the oldest live due run (ix_runs_live_due, one entry), so the walk
#   below begins with the tenant that waited longest and no tenant waits behind the alphabet;
# - `tenants`: a loose index scan over the tenants with a live run due now, from `start` on in
#   tenant_id order, wrapping round once, at most :scan tenants (one probe each). Only due
#   tenants count toward :scan: tenants with only planned-ahead runs or retries still backing
#   off would otherwise fill it and keep a due tenant sorted after them out of every claim.
#   Each probe reads the index entries it passes (tenant_id first, next_attempt_at filtered in
#   the index), so a claim reads the not-yet-due entries between due tenants once;
# - `due_tenants`: the first :limit of those;
# - `share`: each due tenant's share of the claim, ceil(:limit / due tenants);
# - `picks`: up to `share` oldest due runs per due tenant (an index range each), ranked by
#   turn; `fair` takes turn 1 of every tenant (oldest-waiting tenant first), then turn 2, ...
# The final LATERAL locks each choice through the primary key, re-checked as due (a run another
# claimer took meanwhile is skipped); the claim's fallback fills what another replica holds.
_FAIR_CHOICE = f"""
WITH RECURSIVE
start AS (
  SELECT tenant_id FROM runs
  WHERE {LIVE_DUE_SQL} AND next_attempt_at <= :now
  ORDER BY next_attempt_at LIMIT 1
),
tenants(tenant_id, n) AS (
  SELECT tenant_id, 1 FROM start
  UNION ALL
  SELECT nxt.tenant_id, t.n + 1 FROM tenants t CROSS JOIN LATERAL (
    SELECT coalesce(
      (SELECT r.tenant_id FROM runs r WHERE {LIVE_DUE_SQL} AND r.tenant_id > t.tenant_id
       AND r.next_attempt_at <= :now ORDER BY r.tenant_id LIMIT 1),
      (SELECT r.tenant_id FROM runs r WHERE {LIVE_DUE_SQL} AND r.next_attempt_at <= :now
       ORDER BY r.tenant_id LIMIT 1)
    ) AS tenant_id
  ) nxt
  WHERE t.n < :scan AND nxt.tenant_id <> (SELECT tenant_id FROM start)
),
due_tenants AS (
  SELECT t.tenant_id, t.n FROM tenants t LIMIT :limit
),
share AS (
  SELECT CAST(ceil(CAST(:limit AS numeric) / greatest(count(*), 1)) AS int) AS k
  FROM due_tenants
),
picks AS (
  SELECT p.id, d.n,
    row_number() OVER (PARTITION BY d.tenant_id ORDER BY p.next_attempt_at, p.id) AS turn
  FROM due_tenants d CROSS JOIN LATERAL (
    SELECT r.id, r.next_attempt_at FROM runs r
    WHERE {LIVE_DUE_SQL} AND r.tenant_id = d.tenant_id AND r.next_attempt_at <= :now
    ORDER BY r.next_attempt_at, r.id
    LIMIT (SELECT k FROM share)
  ) p
),
fair AS (
  SELECT id FROM picks ORDER BY turn, n, id LIMIT :limit
)
SELECT locked.id FROM fair CROSS JOIN LATERAL (
  SELECT runs.id FROM runs
  WHERE runs.id = fair.id AND {DUE_RECHECK_SQL} AND runs.next_attempt_at <= :now
  FOR UPDATE OF runs SKIP LOCKED
) locked
"""  # noqa: S608 (only the module's own predicate constants are formatted in)
# In the claim statement (claims_pg.py): $3 now, $4 the claim's limit, $5 the tenant scan.
FAIR_CHOICE_SQL = positional(
    _FAIR_CHOICE, {"now": "$3::timestamptz", "limit": "$4::int", "scan": "$5::int"}
)

# The settle write on PostgreSQL, one round trip: its three inputs are JSON arrays of rows (each
# row an array, columns in the order of RUN_COLUMNS, ATTEMPT_COLUMNS, EVENT_COLUMNS): one text
# parameter each, typed jsonb (`_rows`: parsed once), whose text the asyncpg codec sends as it
# is, where 25 array parameters cost ~7 us of client CPU per run to encode (measured).
# - `locked` locks the runs still leased to the completion's owner, in id order (no deadlock
#   with another settle or a lease extension), one primary-key probe per run of the batch (a
#   LATERAL per id: joined on v, the planner read every in_progress run, all replicas' leases,
#   through ix_runs_lease on each settle; with ANY(ids) and the statistics of a burst planned
#   seconds ago, through ix_runs_destination_leased);
# - `written` stores their state (its WHERE re-checks the lease on the newest row version);
# - attempts and outbox rows are inserted for the written runs only, in completion order;
# - `reset` is the breaker's all-succeeded case (on SQLite `Settle._reset_consecutive_failures`).
# Data-modifying CTEs always run to completion, whether or not the final SELECT reads them.
RUN_COLUMNS = (
    ("id", "text"),
    ("owner", "text"),
    ("status", "text"),
    ("skip_reason", "text"),
    ("attempt_count", "int"),
    ("next_attempt_at", "timestamptz"),
    ("started_at", "timestamptz"),
    ("finished_at", "timestamptz"),
    ("lease_owner", "text"),
    ("lease_expires_at", "timestamptz"),
)
ATTEMPT_COLUMNS = (
    ("run_id", "text"),
    ("number", "int"),
    ("started_at", "timestamptz"),
    ("duration_ms", "int"),
    ("status_code", "int"),
    ("error_kind", "text"),
    ("error_message", "text"),
    ("response_excerpt", "text"),
)
EVENT_COLUMNS = (
    ("run_id", "text"),
    *((c, "timestamptz" if c == "created_at" else "text") for c in OUTBOX_COLUMNS),
)


def _rows(parameter: str, columns: tuple[tuple[str, str], ...]) -> str:
    """The rows of a JSON array-of-arrays parameter as columns, with their position `n`. As
    jsonb, parsed once: `->>` on json parses its row again for every field (measured: 17 us
    of PostgreSQL CPU per outbox row as json, 4 us as jsonb)."""
    fields = ", ".join(f"(e.r->>{i})::{t} AS {c}" for i, (c, t) in enumerate(columns))
    rows = f"jsonb_array_elements({parameter}::jsonb) WITH ORDINALITY e(r, n)"
    return f"SELECT {fields}, e.n FROM {rows}"  # noqa: S608 (the module's own constants)


WRITE_OWNED_SQL = f"""
WITH v AS ({_rows("$1", RUN_COLUMNS)}),
locked AS (
  SELECT l.id FROM (SELECT id, owner FROM v ORDER BY id) mine CROSS JOIN LATERAL (
    SELECT runs.id FROM runs
    WHERE runs.id = mine.id AND {LEASED_RECHECK_SQL} AND runs.lease_owner = mine.owner
    FOR UPDATE OF runs
  ) l
),
written AS (
  UPDATE runs SET status = v.status, skip_reason = v.skip_reason,
    attempt_count = v.attempt_count, next_attempt_at = v.next_attempt_at,
    started_at = v.started_at, finished_at = v.finished_at, lease_owner = v.lease_owner,
    lease_expires_at = v.lease_expires_at
  FROM v
  WHERE runs.id = ANY(ARRAY(SELECT id FROM locked)) AND runs.id = v.id
    AND {LEASED_RECHECK_SQL} AND runs.lease_owner = v.owner
  RETURNING runs.id, runs.schedule_id, runs.status
),
attempts_in AS (
  INSERT INTO delivery_attempts (run_id, number, started_at, duration_ms, status_code,
    error_kind, error_message, response_excerpt)
  SELECT a.run_id, a.number, a.started_at, a.duration_ms, a.status_code, a.error_kind,
    a.error_message, a.response_excerpt
  FROM ({_rows("$2", ATTEMPT_COLUMNS)}) a
  WHERE a.run_id IN (SELECT id FROM written)
  ORDER BY a.n
),
events_in AS (
  INSERT INTO outbox (event_id, topic, key, type, payload, created_at)
  SELECT e.event_id, e.topic, e.key, e.type, e.payload, e.created_at
  FROM ({_rows("$3", EVENT_COLUMNS)}) e
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
"""  # noqa: S608 (only the module's own column constants are formatted in)
