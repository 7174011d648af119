"""`python -m scheduler.entrypoints.workers`: the worker role alone (planner, dispatcher, outbox
relay, tenant-state consumer + /healthz, /readyz, /metrics), configured from the environment
like `scheduler serve`. Tests use it as a real subprocess (SIGKILL, SIGTERM, replicas)."""

from __future__ import annotations

import argparse
from datetime import timedelta

from scheduler.bootstrap import bootstrap, utc_now
from scheduler.entrypoints.workers.runtime import WorkerOptions, WorkerRuntime
from scheduler.entrypoints.workers.serve import serve
from scheduler.service_layer.dispatch_service import DispatchSettings
from scheduler.service_layer.planning_service import PlanningSettings
from scheduler.service_layer.schedules import Clock
from servicekit.logging import configure_logging
from servicekit.runtime import event_loop
from servicekit.runtime.gc_tuning import freeze_startup_heap


def main(argv: list[str] | None = None, *, clock: Clock = utc_now) -> int:
    """`clock`: every worker's time (tests run this process on a shifted clock: a fault test
    never waits minutes for occurrences to come due)."""
    p = argparse.ArgumentParser(prog="python -m scheduler.entrypoints.workers")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090)
    p.add_argument("--grace", type=float, default=10.0, help="seconds to finish in-flight runs")
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--lease", type=float, default=30.0, help="lease seconds of a claimed run")
    p.add_argument("--lookahead", type=float, default=None, help="planner look-ahead seconds")
    p.add_argument("--no-planner", action="store_true")
    p.add_argument("--no-dispatcher", action="store_true")
    p.add_argument("--no-relay", action="store_true")
    p.add_argument("--no-tenant-consumer", action="store_true")
    args = p.parse_args(argv)
    configure_logging(service="scheduler-worker")

    async def _main() -> None:
        container = bootstrap(clock=clock)
        s = container.settings
        options = WorkerOptions(
            dispatch=DispatchSettings(
                concurrency=args.concurrency or s.dispatch_concurrency,
                lease_seconds=args.lease,
            ),
            planning=PlanningSettings(
                lookahead=timedelta(seconds=args.lookahead or s.planner_lookahead_seconds)
            ),
            planner=not args.no_planner,
            dispatcher=not args.no_dispatcher,
            relay=not args.no_relay,
            tenant_consumer=not args.no_tenant_consumer,
        )
        runtime = WorkerRuntime(container, options=options)
        freeze_startup_heap()
        try:
            await serve(
                runtime,
                host=args.host,
                port=args.port,
                grace_seconds=args.grace,
                limits=s.http_limits(),
            )
        finally:
            await container.aclose()

    event_loop.run(_main())  # uvloop where installed: a worker serves no public API
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
