"""`POST /v1/runs/{run_id}/complete` (DESIGN.md §7b "Completion"): a callback-mode receiver
reports the end of the job it accepted. No tenant token: `Authorization: Bearer <the
X-Run-Complete-Token of the attempt>` is the credential, valid for that run's current attempt
only. 200 for the call that ends the attempt and for the same call again; 409 when the attempt
already ended otherwise (another status, or its deadline passed); 401 for any other token, or a
run id that does not exist (the same answer: no existence leaks); 503 with Retry-After when the
call raced the worker's write of the acceptance; 429 with Retry-After past the per-run limit."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Header, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator

from scheduler.domain.completion import MAX_TOKEN_CHARS
from scheduler.domain.run import (
    MAX_COMPLETION_DETAIL_CHARS,
    MAX_COMPLETION_OUTPUT_BYTES,
    CompletionReport,
    CompletionStatus,
    CompletionVerdict,
)
from scheduler.entrypoints.api.context import runs_context_of
from scheduler.entrypoints.api.problems import problem
from scheduler.entrypoints.api.rate_limit import KeyedRateLimit
from scheduler.entrypoints.api.schemas import Strict, problem_responses
from scheduler.service_layer import completion as svc
from servicekit.data.jsonvalue import StorableJson
from servicekit.http.problems import ProblemError
from servicekit.rfc3339 import UtcTimestamp
from servicekit.text import NO_CONTROL_CHARS, TAB_AND_NEWLINE_ONLY

router = APIRouter(
    prefix="/v1/runs", tags=["runs"], responses=problem_responses(401, 409, 422, 429, 503)
)
RunIdPath = Annotated[
    str, Path(min_length=1, max_length=64, description="run id"), NO_CONTROL_CHARS
]


class CompleteIn(Strict):
    status: Literal["succeeded", "failed"]
    detail: (
        Annotated[
            str,
            Field(
                max_length=MAX_COMPLETION_DETAIL_CHARS,
                description="what happened, for people (shown on the run and its attempt)",
            ),
            TAB_AND_NEWLINE_ONLY,
        ]
        | None
    ) = None
    output: StorableJson = Field(
        default=None,
        description=f"the job's result, any JSON of at most {MAX_COMPLETION_OUTPUT_BYTES} "
        "bytes serialized (shown on the run and its attempt)",
    )
    final: bool = Field(
        default=False,
        description="failed only: do not retry (the run fails now, whatever its retry policy)",
    )

    @field_validator("output")
    @classmethod
    def _output_bounded(cls, value: Any) -> Any:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
        if size > MAX_COMPLETION_OUTPUT_BYTES:
            raise ValueError(
                f"output is {size} bytes serialized; the limit is {MAX_COMPLETION_OUTPUT_BYTES}"
            )
        return value


class CompleteOut(BaseModel):
    run_id: str
    status: str = Field(description="the run's status after the call")
    completion_status: Literal["succeeded", "failed", "timed_out"] | None
    completed_at: UtcTimestamp | None
    too_fast: bool
    replayed: bool = Field(description="true: the same call already ended the attempt")


def install_completion(app: FastAPI, calls_per_minute: int) -> None:
    """Mount the route (after `install_runs`: it uses the runs context) with its rate limit."""
    app.state.completion_limit = KeyedRateLimit(calls_per_minute)
    app.include_router(router)


async def _within_rate_limit(request: Request, run_id: RunIdPath) -> None:
    """Every call counts, a malformed one too (a dependency runs before the body is judged)."""
    limit: KeyedRateLimit = request.app.state.completion_limit
    wait = limit.check(run_id)
    if wait is not None:
        raise ProblemError(
            429,
            "too-many-requests",
            "too many completion calls for this run; retry later",
            headers={"Retry-After": str(wait)},
        )


@router.post(
    "/{run_id}/complete",
    operation_id="completeRun",
    response_model=CompleteOut,
    description="Report the end of a callback-mode run's job with its X-Run-Complete-Token as "
    "the bearer token (no tenant token).",
)
async def complete_run(
    request: Request,
    run_id: RunIdPath,
    body: CompleteIn,
    _: Annotated[None, Depends(_within_rate_limit)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Any:
    ctx = runs_context_of(request)
    report = CompletionReport(
        CompletionStatus(body.status), body.detail, body.output, final=body.final
    )
    try:
        result = await svc.complete_run(
            ctx.uows, run_id, _bearer(authorization), report, ctx.clock()
        )
    except svc.CompletionUnauthorized as exc:
        return problem(request, 401, str(exc), headers={"WWW-Authenticate": "Bearer"})
    except svc.CompletionConflict as exc:
        return problem(request, 409, str(exc), slug="completion-conflict")
    except svc.CompletionTooEarly as exc:
        retry = str(svc.CompletionTooEarly.RETRY_AFTER_SECONDS)
        return problem(request, 503, str(exc), headers={"Retry-After": retry})
    run = result.run
    return JSONResponse(
        CompleteOut(
            run_id=run.id,
            status=run.status.value,
            completion_status=None
            if run.completion_status is None
            else run.completion_status.value,
            completed_at=None if run.completed_at is None else run.completed_at.astimezone(UTC),
            too_fast=run.too_fast,
            replayed=result.verdict is CompletionVerdict.REPLAYED,
        ).model_dump(mode="json")
    )


def _bearer(authorization: str | None) -> str:
    """The bearer token, or "" (refused like a wrong one) when the header is absent or odd."""
    if authorization is None or len(authorization) > MAX_TOKEN_CHARS + 16:
        return ""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""
