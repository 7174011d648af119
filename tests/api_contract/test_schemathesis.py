"""schemathesis with every check (`--checks all`) against both services, each on PostgreSQL
behind a real uvicorn server, through its engine (the CLI's runner: examples, coverage, fuzzing
and stateful phases): 0 failures, 0 errors.

`positive_data_acceptance` also accepts 400, 412 and 422 for schema-valid requests (and 429: the
completion route's per-run rate limit, which the fuzzer's calls for one run id reach): some rules
are beyond JSON Schema (the cron grammar, IANA zone names, the SSRF rules on a target URL, an
opaque cursor that must be one we issued, an If-Match that must name the current version).
Everything a schema *can* say (lengths, control characters, header tokens, RFC 3339 date-times,
nullability) is in it, so every negative example must be refused with a 4xx.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import schemathesis
from schemathesis.core.result import Ok
from schemathesis.engine import Status, events, from_schema

from tests.api_contract.conftest import Served, bearer

MAX_EXAMPLES = 15  # per operation and phase: both services in well under 2 min on 2 cores
CONFIG: dict[str, Any] = {
    "checks": {
        "positive_data_acceptance": {
            "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "412", "422", "429"]
        },
        # Its default list plus 413: an apply body over its byte limit is refused before its
        # item count is read (10,001 generated definitions pass 4 MiB).
        "negative_data_rejection": {
            "expected-statuses": [
                "400",
                "401",
                "403",
                "404",
                "405",
                "406",
                "409",
                "413",
                "415",
                "422",
                "428",
                "429",
                "5xx",
            ]
        },
    },
    "generation": {"max-examples": MAX_EXAMPLES, "database": "none"},
    "request-timeout": 10,
    "seed": 20261201,  # the same examples on every run: a failure reproduces
}


def run_engine(served: Served) -> tuple[list[str], Counter[int]]:
    """Failures and errors as one line each (all of them, not the first), and the statuses."""
    config = schemathesis.Config.from_dict(
        {**CONFIG, "base-url": served.base_url, "headers": bearer()}
    )
    schema = schemathesis.openapi.from_dict(served.openapi, config=config)
    problems: list[str] = []
    statuses: Counter[int] = Counter()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            for interaction in event.recorder.interactions.values():
                if interaction.response is not None:
                    statuses[interaction.response.status_code] += 1
            for checks in event.recorder.checks.values():
                for check in checks:
                    if check.status is Status.FAILURE and check.failure_info is not None:
                        failure = check.failure_info.failure
                        problems.append(
                            f"{event.label} [{event.phase.name}] {check.name}: "
                            f"{failure.title}: {failure.message[:600]}\n"
                            f"{check.failure_info.code_sample[:600]}"
                        )
        elif isinstance(event, events.NonFatalError):
            problems.append(f"error: {event.info.format()[:1500]}")
        elif isinstance(event, events.FatalError):
            problems.append(f"fatal: {event.exception!r}"[:1500])
    return list(dict.fromkeys(problems)), statuses


def _operations(served: Served) -> int:
    schema = schemathesis.openapi.from_dict(served.openapi)
    return sum(isinstance(op, Ok) for op in schema.get_all_operations())


@pytest.mark.slow
@pytest.mark.parametrize("service", ["scheduler", "notification"])
def test_every_check_passes(service: str, request: pytest.FixtureRequest) -> None:
    served: Served = request.getfixturevalue(f"{service}_server")
    problems, statuses = run_engine(served)
    print(service, sum(statuses.values()), "requests:", dict(sorted(statuses.items())))
    assert not problems, "\n\n".join(problems)
    assert sum(statuses.values()) >= 20 * _operations(served)  # it really ran every operation
    assert not [s for s in statuses if s >= 500]
    assert any(200 <= s < 300 for s in statuses)
