"""The scheduler's tables (SQLAlchemy Core): schedules, idempotency keys, the outbox, runs and
their delivery attempts. Migrations are the source of truth for the schema; these describe the
same tables for queries, and tests check the two agree (`tests/scheduler/runs/test_run_schema.py`
for the runs).

Run index choices (every hot query is O(rows it returns), never O(table)):
- `uq_runs_planned_occurrence` (schedule_id, scheduled_for) WHERE trigger = 'schedule': the
  exactly-one-run-per-occurrence guarantee; a violation reads as "already planned".
- `uq_runs_backfill_occurrence` (schedule_id, scheduled_for, backfill_id) WHERE trigger =
  'backfill': one backfill run per (schedule, occurrence, backfill request) (migration 0007).
- Due runs in two lanes (migration 0007), so a backfill's old due runs never sit in front of
  live ones: `ix_runs_live_due` (next_attempt_at) and `ix_runs_live_due_tenant` (tenant_id,
  next_attempt_at, id) WHERE LIVE_DUE_SQL: the tenant-fair claim (each tenant's oldest, from
  the tenant whose run waited longest) and the sleep probe; `ix_runs_backfill_due`
  (next_attempt_at) WHERE BACKFILL_DUE_SQL: the lower-priority lane.
- `ix_runs_lease` (lease_expires_at) WHERE status = 'in_progress': runs whose worker died.
- `ix_runs_schedule_history` (schedule_id, scheduled_for, id): run history pages.
- `ix_runs_schedule_unfinished` (schedule_id, scheduled_for) WHERE UNFINISHED_LIVE_SQL
  (migration 0009): the overlap checks ("is an earlier run of this schedule unfinished"), a few
  entries per schedule whatever its history.
- `ix_runs_tenant_scheduled` (tenant_id, scheduled_for), beside the tenant tables
  (`tenant_store.py`): the tenant-wide history (`GET /v1/schedules/-/runs`), read newest first.
- `ix_runs_tenant_created` (tenant_id, created_at) WHERE status <> 'skipped' (migration 0011):
  the max_runs_per_day count, the runs a tenant's UTC day created, a range of that day alone.
- `ix_runs_tenant_failed` (tenant_id, scheduled_for, id) and `ix_runs_schedule_failed`
  (schedule_id, scheduled_for, id) WHERE status = 'failed' (migration 0008): the dead-letter
  lists (`?status=failed`), which would otherwise filter the whole history newest first.
Partial-index predicates are written as SQL literals in queries too (never bound parameters), so
PostgreSQL can prove a query implies the predicate even with a generic prepared plan.
"""

from __future__ import annotations

import sqlalchemy as sa

from scheduler.adapters.db.types import JSONText, LabelsJSON, partial_index
from servicekit.data.columns import UTCDateTime

metadata = sa.MetaData()

# ix_schedules_due's predicate: queries that must use the index repeat it word for word.
ACTIVE_LIVE_SQL = "state = 'active' AND deleted_at IS NULL"

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a bigint identity.
BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("cron", sa.String(200), nullable=True),  # null for a one-shot (run_at)
    sa.Column("timezone", sa.String(64), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("target", JSONText(), nullable=False),
    sa.Column("payload", JSONText(), nullable=False),
    sa.Column("retry_policy", JSONText(), nullable=False),
    sa.Column("misfire_policy", sa.String(16), nullable=False),
    sa.Column("overlap_policy", sa.String(16), nullable=False),
    sa.Column("breaker", JSONText(), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("paused_reason", sa.String(200), nullable=True),
    sa.Column("next_run_at", UTCDateTime(), nullable=True),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    sa.Column("updated_at", UTCDateTime(), nullable=False),
    sa.Column("deleted_at", UTCDateTime(), nullable=True),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("consecutive_failures", sa.Integer(), nullable=False),
    sa.Column("secret_ciphertext", sa.Text(), nullable=False),
    sa.Column("previous_secret_ciphertext", sa.Text(), nullable=True),
    sa.Column("previous_secret_expires_at", UTCDateTime(), nullable=True),
    # Timing (migration 0006, DESIGN.md §7a).
    sa.Column("description", sa.String(1000), nullable=True),
    sa.Column("dst_policy", sa.String(16), nullable=False, server_default="shift"),
    sa.Column("start_at", UTCDateTime(), nullable=True),
    sa.Column("end_at", UTCDateTime(), nullable=True),
    sa.Column("max_runs", sa.Integer(), nullable=True),
    sa.Column("run_at", UTCDateTime(), nullable=True),
    sa.Column("jitter_seconds", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("planned_runs", sa.Integer(), nullable=False, server_default="0"),
    # Labels and key (migration 0013, DESIGN.md §7b).
    sa.Column("labels", LabelsJSON, nullable=False, server_default="{}"),
    sa.Column("key", sa.String(128), nullable=True),
    # Completion policy (migration 0016, DESIGN.md §7b); null on older rows: response mode.
    sa.Column("completion", JSONText(), nullable=True),
    # The target's `host:port` (migration 0017, flow control): null for an event schedule.
    sa.Column("destination", sa.String(261), nullable=True),
)
sa.Index("ix_schedules_destination", schedules.c.tenant_id, schedules.c.destination)
# Due schedules cost O(due): a partial index on next_run_at over active, live rows only.
partial_index("ix_schedules_due", schedules.c.next_run_at, where=ACTIVE_LIVE_SQL)
sa.Index("ix_schedules_tenant_order", schedules.c.tenant_id, schedules.c.created_at, schedules.c.id)
# A key names one live schedule of its tenant; a deleted schedule's key is free again. The
# repository reads a violation of this index by its name as 409 key-conflict.
KEY_INDEX = "uq_schedules_tenant_key"
LIVE_KEY_SQL = "deleted_at IS NULL AND key IS NOT NULL"
partial_index(KEY_INDEX, schedules.c.tenant_id, schedules.c.key, where=LIVE_KEY_SQL, unique=True)
# Label filters (`?label=k=v` is `labels @> {"k": "v"}`, `?label=k` is `labels ? 'k'`): one GIN
# index with the default jsonb_ops class serves both (jsonb_path_ops would serve only `@>`).
# PostgreSQL only: SQLite filters the tenant's rows with json_extract.
sa.Index("ix_schedules_labels", schedules.c.labels, postgresql_using="gin")

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("tenant_id", sa.String(200), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("request_hash", sa.String(64), nullable=False),
    sa.Column("schedule_id", sa.String(40), nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
)

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(64), nullable=False, unique=True),
    sa.Column("topic", sa.String(100), nullable=False),
    sa.Column("key", sa.String(100), nullable=False),
    sa.Column("type", sa.String(100), nullable=False),
    sa.Column("payload", sa.Text(), nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    sa.Column("sent_at", UTCDateTime(), nullable=True),
)
sa.Index(
    "ix_outbox_unsent",
    outbox.c.id,
    postgresql_where=sa.text("sent_at IS NULL"),
    sqlite_where=sa.text("sent_at IS NULL"),
)
# Retention of sent rows (migration 0004; adapters/db/retention_store.py).
sa.Index(
    "ix_outbox_sent_at",
    outbox.c.sent_at,
    postgresql_where=sa.text("sent_at IS NOT NULL"),
    sqlite_where=sa.text("sent_at IS NOT NULL"),
)

# ---- schedule versions (migration 0014, adapters/db/versions.py) ----------------------------

# Retention's candidates: versions another one superseded (the latest never is).
SUPERSEDED_SQL = "superseded_at IS NOT NULL"

schedule_versions = sa.Table(
    "schedule_versions",
    metadata,
    # The primary key serves every read: a schedule's versions newest first, one version, and
    # "which version was in force at t" (at <= t < superseded_at).
    sa.Column("schedule_id", sa.String(40), primary_key=True),
    sa.Column("version", sa.Integer(), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("at", UTCDateTime(), nullable=False),
    # When the next version was written (null: this is the schedule's latest).
    sa.Column("superseded_at", UTCDateTime(), nullable=True),
    sa.Column("actor", sa.String(255), nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    # `active`, `paused`, `completed` or `deleted`.
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("paused_reason", sa.String(200), nullable=True),
    # The definition in the API's shape (flat field names); never a secret.
    sa.Column("definition", JSONText(), nullable=False),
    # [{"field", "from", "to"}], a new secret as {"field": "secret"} alone.
    sa.Column("changes", JSONText(), nullable=False),
)
partial_index(
    "ix_schedule_versions_superseded", schedule_versions.c.superseded_at, where=SUPERSEDED_SQL
)

# ---- runs (migration 0002 and later) ------------------------------------------------------

UNFINISHED_SQL = "status IN ('pending', 'in_progress', 'retrying')"
# The overlap checks' runs: unfinished and not backfill runs (a backfill never holds up a live
# occurrence). Unqualified names: use it where `runs` (or its alias) is the only FROM.
UNFINISHED_LIVE_SQL = f"{UNFINISHED_SQL} AND trigger <> 'backfill'"
LIVE_DUE_SQL = "status IN ('pending', 'retrying') AND trigger <> 'backfill'"
BACKFILL_DUE_SQL = "status IN ('pending', 'retrying') AND trigger = 'backfill'"
BACKFILL_SQL = "trigger = 'backfill'"
LEASED_SQL = "status = 'in_progress'"
FAILED_SQL = "status = 'failed'"
PLANNED_SQL = "trigger = 'schedule'"
# The runs max_runs_per_day counts (a skipped run does no work).
COUNTED_SQL = "status <> 'skipped'"
# The claim's per-row re-check: the runs due in either lane (the six statuses are a closed
# set), written so PostgreSQL re-checks through the primary key (claims_pg.CLAIM_PLANNER).
DUE_RECHECK_SQL = "status NOT IN ('in_progress', 'succeeded', 'failed', 'skipped')"
# A by-id statement's check that a run is (still) in progress, written so that PostgreSQL cannot
# prove a partial index's predicate from it. With the statistics of a burst planned seconds ago
# (not yet analysed), the planner takes the partial indexes of the leased runs for empty and
# reads all of them for each id instead of probing the primary key (measured: 1,499 rows read
# for one lease extension of 1,500 leased runs; EXPLAIN tests in test_settle_leased.py).
LEASED_RECHECK_SQL = "(runs.status || '') = 'in_progress'"

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("schedule_id", sa.String(40), nullable=False),
    sa.Column("scheduled_for", UTCDateTime(), nullable=False),
    sa.Column("trigger", sa.String(16), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("skip_reason", sa.String(32), nullable=True),
    sa.Column("attempt_count", sa.Integer(), nullable=False),
    # pending/retrying: when due; in_progress: when claimed (a lost attempt's start).
    sa.Column("next_attempt_at", UTCDateTime(), nullable=True),
    sa.Column("started_at", UTCDateTime(), nullable=True),
    sa.Column("finished_at", UTCDateTime(), nullable=True),
    sa.Column("lease_owner", sa.String(100), nullable=True),
    sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
    # The payload this run delivers (snapshot when planned or triggered; a replay copies it).
    sa.Column("payload", JSONText(), nullable=True),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    # scheduled_for plus the schedule's jitter (migration 0006); null on older rows.
    sa.Column("due_at", UTCDateTime(), nullable=True),
    # The backfill request a backfill run belongs to (migration 0007); null on other runs.
    sa.Column("backfill_id", sa.String(40), nullable=True),
    # The run a replay run replays (migration 0012); null on other runs. Not a foreign key:
    # retention deletes old runs, and a replay outlives the run it copied.
    sa.Column("replay_of", sa.String(40), nullable=True),
    # The schedule's version that planned (or, for manual, replay and backfill runs, was current
    # when asked for) this run (migration 0014); null on older rows.
    sa.Column("schedule_version", sa.Integer(), nullable=True),
    # Completion callbacks (migration 0016, domain/run.py "Awaiting a completion"): the
    # deadline while awaiting (cleared when it ends), the token's attempt and SHA-256, how that
    # attempt's awaiting ended, and the last completion call's time, detail and output.
    sa.Column("completion_deadline", UTCDateTime(), nullable=True),
    sa.Column("completion_attempt", sa.Integer(), nullable=True),
    sa.Column("completion_token_hash", sa.String(64), nullable=True),
    sa.Column("completion_status", sa.String(16), nullable=True),
    sa.Column("completed_at", UTCDateTime(), nullable=True),
    sa.Column("completion_detail", sa.Text(), nullable=True),
    sa.Column("completion_output", JSONText(), nullable=True),
    sa.Column("too_fast", sa.Boolean(), nullable=False, server_default=sa.false()),
    # Its schedule's destination, copied by the claim (migration 0017): the in-flight count.
    sa.Column("destination", sa.String(261), nullable=True),
    # Seconds flow control kept it back after its first attempt (migration 0020): not counted
    # toward max_retry_duration_seconds. Null: none.
    sa.Column("held_seconds", sa.Float(), nullable=True),
    # Room on each page for the claim's and the settle's row versions (migration 0010).
    postgresql_with={"fillfactor": "70"},
)
partial_index(
    "uq_runs_planned_occurrence",
    runs.c.schedule_id,
    runs.c.scheduled_for,
    where=PLANNED_SQL,
    unique=True,
)
partial_index(
    "uq_runs_backfill_occurrence",
    runs.c.schedule_id,
    runs.c.scheduled_for,
    runs.c.backfill_id,
    where=BACKFILL_SQL,
    unique=True,
)
partial_index("ix_runs_live_due", runs.c.next_attempt_at, where=LIVE_DUE_SQL)
partial_index(
    "ix_runs_live_due_tenant",
    runs.c.tenant_id,
    runs.c.next_attempt_at,
    runs.c.id,
    where=LIVE_DUE_SQL,
)
partial_index("ix_runs_backfill_due", runs.c.next_attempt_at, where=BACKFILL_DUE_SQL)
partial_index("ix_runs_lease", runs.c.lease_expires_at, where=LEASED_SQL)
# The completion watchdog's probe: only runs awaiting a completion call (migration 0016).
AWAITING_SQL = "completion_deadline IS NOT NULL"
partial_index("ix_runs_completion_deadline", runs.c.completion_deadline, where=AWAITING_SQL)
partial_index("ix_runs_destination_leased", runs.c.tenant_id, runs.c.destination, where=LEASED_SQL)
sa.Index("ix_runs_schedule_history", runs.c.schedule_id, runs.c.scheduled_for, runs.c.id)
partial_index(
    "ix_runs_schedule_unfinished",
    runs.c.schedule_id,
    runs.c.scheduled_for,
    where=UNFINISHED_LIVE_SQL,
)
partial_index("ix_runs_tenant_created", runs.c.tenant_id, runs.c.created_at, where=COUNTED_SQL)
partial_index(
    "ix_runs_tenant_failed",
    runs.c.tenant_id,
    runs.c.scheduled_for,
    runs.c.id,
    where=FAILED_SQL,
)
partial_index(
    "ix_runs_schedule_failed",
    runs.c.schedule_id,
    runs.c.scheduled_for,
    runs.c.id,
    where=FAILED_SQL,
)

delivery_attempts = sa.Table(
    "delivery_attempts",
    metadata,
    sa.Column("run_id", sa.String(40), primary_key=True),
    sa.Column("number", sa.Integer(), primary_key=True),
    sa.Column("started_at", UTCDateTime(), nullable=False),
    sa.Column("duration_ms", sa.Integer(), nullable=False),
    sa.Column("status_code", sa.Integer(), nullable=True),
    sa.Column("error_kind", sa.String(32), nullable=True),
    sa.Column("error_message", sa.String(500), nullable=True),
    # <= 1 KiB of UTF-8 (webhookdeliver's bound); never holds our secret: it is the receiver's text.
    sa.Column("response_excerpt", sa.Text(), nullable=True),
    # Callback mode (migration 0016): when the awaiting ended, the call's detail and output.
    sa.Column("completed_at", UTCDateTime(), nullable=True),
    sa.Column("completion_detail", sa.Text(), nullable=True),
    sa.Column("completion_output", JSONText(), nullable=True),
)

# ---- the ledger's periodic check (migration 0015, adapters/db/ledger.py) --------------------

ledger_watermarks = sa.Table(
    "ledger_watermarks",
    metadata,
    sa.Column("schedule_id", sa.String(40), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    # Occurrences up to this instant are counted (service_layer/ledger_watch.py).
    sa.Column("checked_until", UTCDateTime(), nullable=False),
)
sa.Index("ix_ledger_watermarks_checked", ledger_watermarks.c.checked_until)

# ---- flow control (migration 0017, DESIGN.md §7b) -------------------------------------------

destinations = sa.Table(
    "destinations",
    metadata,
    sa.Column("tenant_id", sa.String(200), primary_key=True),
    sa.Column("destination", sa.String(261), primary_key=True),
    # The tenant's policy (PUT); a row without one carries the destination's state only.
    sa.Column("configured", sa.Boolean(), nullable=False),
    sa.Column("max_in_flight", sa.Integer(), nullable=True),
    sa.Column("per_second", sa.Float(), nullable=True),
    # What the destination told us (servicekit.flow.FlowState) and the token bucket.
    sa.Column("held_until", UTCDateTime(), nullable=True),
    sa.Column("current_rate", sa.Float(), nullable=True),
    sa.Column("rate_at", UTCDateTime(), nullable=True),
    sa.Column("cut_at", UTCDateTime(), nullable=True),
    sa.Column("cut_from", sa.Float(), nullable=True),  # migration 0019
    sa.Column("tokens", sa.Float(), nullable=True),
    sa.Column("tokens_at", UTCDateTime(), nullable=True),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    sa.Column("updated_at", UTCDateTime(), nullable=False),
)
