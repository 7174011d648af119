"""The `--processes N` parent's HTTP surface on `--port` (the children listen on loopback ports of
their own): /healthz (the parent is up), /readyz (all N children running and each one's /readyz
answers 200), /metrics (every child's /metrics, each sample labelled `process="<slot>"`, plus the
parent's own restart counter and live-process gauge).

Metrics are scraped from the children at request time rather than with prometheus_client's
multiprocess mode: that mode needs a shared directory, a `multiprocess_mode` for every gauge
(the workers' gauges such as queue depth and readiness mean nothing summed across processes) and
supports no custom collectors. Scraping keeps each child's registry as it is; the families are
merged so that each appears once, as the exposition format requires. A child that does not answer
within `SCRAPE_TIMEOUT_SECONDS` is left out of that scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterable

import aiohttp
from fastapi import APIRouter, FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from scheduler.adapters.db.migrate import upgrade
from scheduler.config import SchedulerSettings
from scheduler.entrypoints.workers.supervisor import Child, WorkerSupervisor
from servicekit.http.health import HEALTH_TAG, READY_TIMEOUT_SECONDS
from servicekit.http.problems import install_problem_handlers, problem_response
from servicekit.http.server import HttpLimits, http_server, serve

SCRAPE_TIMEOUT_SECONDS = 5.0  # under Prometheus's default 10 s scrape timeout
PROCESS_LABEL = "process"


def run_parent(
    settings: SchedulerSettings,
    *,
    processes: int,
    host: str,
    port: int,
    grace_seconds: float,
    dev: bool,
) -> int:
    """`scheduler serve --role worker --processes N` (N > 1) to its end: the exit code."""
    if settings.database_url.startswith("sqlite"):
        print(
            "scheduler: --processes > 1 needs PostgreSQL (SQLite has one writer)", file=sys.stderr
        )
        return 2
    if dev:  # once, here: N children migrating at once would race
        asyncio.run(upgrade(settings.database_url, bounds=settings.database_bounds()))

    async def main() -> None:
        registry = CollectorRegistry()
        supervisor = WorkerSupervisor(
            processes, grace_seconds=grace_seconds, dev_keys=dev, registry=registry
        )
        await serve_parent(
            supervisor, registry, host=host, port=port, limits=settings.http_limits()
        )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())  # the parent serves only probes: asyncio's own loop is enough
    return 0


async def serve_parent(
    supervisor: WorkerSupervisor,
    registry: CollectorRegistry,
    *,
    host: str,
    port: int,
    limits: HttpLimits,
) -> None:
    """Serve the parent's app while the supervisor keeps its children; SIGTERM/SIGINT: the
    children stop first (supervisor.stop), then the server."""
    server = http_server(
        create_supervisor_app(supervisor, registry), host=host, port=port, limits=limits
    )
    await serve([server], run=supervisor.run, drain=supervisor.stop)


def create_supervisor_app(supervisor: WorkerSupervisor, registry: CollectorRegistry) -> FastAPI:
    app = FastAPI(title="scheduler-worker-processes", docs_url=None, redoc_url=None)
    install_problem_handlers(app)
    router = APIRouter(tags=[HEALTH_TAG["name"]])

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz", response_model=None)
    async def readyz() -> Response | dict[str, str]:
        ready = await ready_children(supervisor)
        if ready < supervisor.processes:
            return problem_response(
                503,
                slug="not-ready",
                detail=f"{ready} of {supervisor.processes} worker processes ready",
                instance="/readyz",
            )
        return {"status": "ready"}

    @router.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        children = list(supervisor.children.values())
        texts = await asyncio.gather(
            *(_get(c, "/metrics", SCRAPE_TIMEOUT_SECONDS) for c in children)
        )
        own = generate_latest(registry).decode()
        labelled = [(str(c.slot), t) for c, t in zip(children, texts, strict=True) if t]
        return Response(merged_exposition(own, labelled), media_type=CONTENT_TYPE_LATEST)

    app.include_router(router)
    return app


async def ready_children(supervisor: WorkerSupervisor) -> int:
    """How many children answer /readyz with 200 (each bounded like servicekit's readiness)."""
    children = list(supervisor.children.values())
    answers = await asyncio.gather(*(_get(c, "/readyz", READY_TIMEOUT_SECONDS) for c in children))
    return sum(a is not None for a in answers)


async def _get(child: Child, path: str, seconds: float) -> str | None:
    """The body of a 200 answer from the child, else None."""
    url = f"http://127.0.0.1:{child.port}{path}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds)) as session,
            session.get(url) as r,
        ):
            return await r.text() if r.status == 200 else None
    except (aiohttp.ClientError, TimeoutError):
        return None


def merged_exposition(own: str, children: Iterable[tuple[str, str]]) -> bytes:
    """The parent's exposition `own` and each `(slot, text)` of a child, labelled with
    `process=slot`, as one exposition with each family once (first seen keeps help and type;
    a child's family of another type under the same name is dropped, not mislabelled)."""
    families: dict[str, Metric] = {}

    def add(text: str, labels: dict[str, str]) -> None:
        try:
            parsed = list(text_string_to_metric_families(text))
        except ValueError:  # a truncated answer: that process is left out of this scrape
            return
        for family in parsed:
            into = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type, family.unit)
            )
            if into.type == family.type:
                into.samples.extend(
                    s._replace(labels={**s.labels, **labels}) for s in family.samples
                )

    add(own, {})
    for slot, text in children:
        add(text, {PROCESS_LABEL: slot})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(families.values())))
    return generate_latest(registry)


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families
