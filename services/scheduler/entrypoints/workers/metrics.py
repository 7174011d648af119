"""Prometheus metrics of the workers: scheduling lag, queue depth, attempts by outcome, breaker
trips by tenant, and the ledger's missing occurrences."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Lag buckets from "on time" to "a minute behind": the DESIGN target is p99 <= 1 s.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class WorkerMetrics:
    """Implements service_layer.dispatch_service.DispatchObserver."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.lag = Histogram(
            "scheduler_run_lag_seconds",
            "First attempt start minus due_at (scheduled_for plus jitter), planned runs only.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.due = Gauge(
            "scheduler_runs_due",
            "Runs due now and not yet claimed (queue depth).",
            registry=registry,
        )
        self._attempt_children: dict[str, Any] = {}
        self.attempts = Counter(
            "scheduler_delivery_attempts",
            "Delivery attempts by outcome (succeeded or the error kind).",
            ["outcome"],
            registry=registry,
        )
        self.settled_runs = Counter(
            "scheduler_runs_settled", "Run transitions written.", registry=registry
        )
        self.lost = Counter(
            "scheduler_lease_lost",
            "Results dropped because the run's lease was taken over.",
            registry=registry,
        )
        self.planned = Counter(
            "scheduler_runs_planned", "Run rows inserted by the planner.", registry=registry
        )
        self.worker_lost_runs = Counter(
            "scheduler_runs_worker_lost",
            "Runs failed worker_lost at take-over: their lease expired the maximum number of times"
            " (reason=lease_expiries) or the lost attempt was the last one (reason=max_attempts).",
            ["reason"],
            registry=registry,
        )
        # Per tenant (the alert names who to call); only tenants whose breaker tripped appear.
        self.breaker_trips = Counter(
            "scheduler_breaker_trips",
            "Schedules paused by the breaker, by tenant.",
            ["tenant_id"],
            registry=registry,
        )

        # Created with the others, so /metrics shows it (at 0) from the start.
        self.ledger_missing = Counter(
            "scheduler_ledger_missing",
            "Occurrences that should have a run and have none (the ledger's `missing`), counted"
            " once each by the worker's periodic check of the last hour.",
            registry=registry,
        )

        self.completion_timeouts = Counter(
            "scheduler_completion_timeouts",
            "Callback-mode attempts failed with completion_timeout: no completion call by the"
            " deadline (the completion watchdog).",
            registry=registry,
        )

    def first_attempt_lag(self, seconds: float) -> None:
        self.lag.observe(max(seconds, 0.0))

    def attempt(self, outcome: str) -> None:
        # One child per outcome (a closed set: succeeded and the error kinds), looked up once:
        # `labels()` validates and locks on every call, and this runs per attempt.
        child = self._attempt_children.get(outcome)
        if child is None:
            child = self._attempt_children[outcome] = self.attempts.labels(outcome=outcome)
        child.inc()

    def breaker_tripped(self, tenant_id: str) -> None:
        self.breaker_trips.labels(tenant_id=tenant_id).inc()

    def worker_lost(self, reason: str) -> None:
        self.worker_lost_runs.labels(reason=reason).inc()

    def settled(self, count: int, lost: int) -> None:
        self.settled_runs.inc(count)
        if lost:
            self.lost.inc(lost)
