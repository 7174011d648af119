"""The served /openapi.json names DESIGN.md §5's routes and documents errors as problem+json."""

from __future__ import annotations

import httpx

# DESIGN.md §7b "Completion": no tenant token (the run's token), so no 403 or 404 either.
COMPLETE = ("post", "/v1/runs/{run_id}/complete")
# DESIGN.md §5's table, as (method, path) pairs.
DESIGN_ROUTES = {
    ("post", "/v1/schedules/"),
    ("put", "/v1/schedules/by-key/{key}"),
    ("get", "/v1/schedules/"),
    ("get", "/v1/schedules/{schedule_id}"),
    ("patch", "/v1/schedules/{schedule_id}"),
    ("delete", "/v1/schedules/{schedule_id}"),
    ("post", "/v1/schedules/{schedule_id}/pause"),
    ("post", "/v1/schedules/{schedule_id}/resume"),
    ("post", "/v1/schedules/{schedule_id}/trigger"),
    ("post", "/v1/schedules/{schedule_id}/secret/rotate"),
    ("get", "/v1/schedules/{schedule_id}/occurrences"),
    ("get", "/v1/schedules/{schedule_id}/runs"),
    ("get", "/v1/schedules/{schedule_id}/runs/{run_id}"),
    ("post", "/v1/schedules/{schedule_id}/runs/{run_id}/replay"),
    ("get", "/v1/schedules/-/runs"),
    ("post", "/v1/schedules/preview"),
    ("post", "/v1/schedules/{schedule_id}/backfill"),
    # DESIGN.md §7b: versions.
    ("get", "/v1/schedules/{schedule_id}/versions"),
    ("get", "/v1/schedules/{schedule_id}/versions/{version}"),
    ("post", "/v1/schedules/{schedule_id}/versions/{version}/restore"),
    # DESIGN.md §7b: the ledger.
    ("get", "/v1/schedules/{schedule_id}/ledger"),
    # Beyond §5 (docs/architecture.md, deviations): the console's run timeline, counted by the API.
    ("get", "/v1/schedules/{schedule_id}/runs/stats"),
    # DESIGN.md §7b.
    ("post", "/v1/schedules/apply"),
    COMPLETE,
    # DESIGN.md §7b "Flow control".
    ("get", "/v1/destinations/"),
    ("get", "/v1/destinations/{destination}"),
    ("put", "/v1/destinations/{destination}"),
    ("delete", "/v1/destinations/{destination}"),
}


async def test_every_design_route_is_served_with_problem_json_errors(
    client: httpx.AsyncClient,
) -> None:
    spec = (await client.get("/openapi.json")).json()
    served = {(m, p) for p, ops in spec["paths"].items() for m in ops if p.startswith("/v1/")}
    assert served == DESIGN_ROUTES
    for method, path in DESIGN_ROUTES:
        responses = spec["paths"][path][method]["responses"]
        statuses = (
            ("401", "409", "429", "503") if (method, path) == COMPLETE else ("401", "403", "404")
        )
        for status in statuses:
            content = responses[status]["content"]
            # Errors are sent as application/problem+json; the schema must be filed there.
            assert list(content) == ["application/problem+json"], (method, path, status)
            assert content["application/problem+json"]["schema"]["required"] == [
                "type",
                "title",
                "status",
            ]


async def test_status_codes_and_schedule_fields_match_design(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    paths = spec["paths"]
    assert "201" in paths["/v1/schedules/"]["post"]["responses"]
    assert "204" in paths["/v1/schedules/{schedule_id}"]["delete"]["responses"]
    assert "202" in paths["/v1/schedules/{schedule_id}/trigger"]["post"]["responses"]
    assert "202" in paths["/v1/schedules/{schedule_id}/runs/{run_id}/replay"]["post"]["responses"]
    runs_params = {
        p["name"] for p in paths["/v1/schedules/{schedule_id}/runs"]["get"]["parameters"]
    }
    assert {"status", "from", "to", "limit", "cursor"} <= runs_params
    schedule = spec["components"]["schemas"]["ScheduleOut"]["properties"]
    assert {
        "id", "name", "cron", "timezone", "action", "target", "payload", "retry_policy",
        "misfire_policy", "overlap_policy", "breaker", "state", "paused_reason", "next_run_at",
        "created_at", "updated_at",
    } <= set(schedule)  # fmt: skip
    with_secret = spec["components"]["schemas"]["ScheduleWithSecret"]["properties"]
    assert "secret" in with_secret
    assert "secret" not in schedule
