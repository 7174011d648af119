"""How a refusal reads: the problem's detail first, then each field error with where its
definition came from; a call that got no answer names the URL."""

from __future__ import annotations

import httpx

from scheduler.entrypoints.clikit.remote import refusal_lines, transport_line
from schedulerclient import ApiError, TransportError

PROBLEM = {
    "type": "https://scheduler-platform.dev/problems/validation-error",
    "status": 422,
    "detail": "schedules[3].cron: minute: value 61 out of range 0-59",
    "errors": [
        {"field": "schedules[3].cron", "detail": "minute: value 61 out of range 0-59"},
        {"field": "schedules[7].timezone", "detail": "unknown time zone 'Mars/Olympus'"},
    ],
}


def _note(field: str) -> str | None:
    return {"schedules[3].cron": "a.yaml: document 4"}.get(field)


def test_the_detail_comes_first_then_each_field_with_its_origin() -> None:
    assert refusal_lines(ApiError(422, PROBLEM), _note) == [
        "schedules[3].cron: minute: value 61 out of range 0-59",
        "  schedules[3].cron: minute: value 61 out of range 0-59 (a.yaml: document 4)",
        "  schedules[7].timezone: unknown time zone 'Mars/Olympus'",
    ]


def test_one_field_without_an_origin_is_the_detail_alone() -> None:
    one = {**PROBLEM, "errors": PROBLEM["errors"][1:], "detail": "timezone: unknown"}
    assert refusal_lines(ApiError(422, one)) == ["timezone: unknown"]


def test_a_problem_without_detail_falls_back_to_its_title_or_status() -> None:
    assert refusal_lines(ApiError(503, {"title": "Service Unavailable"})) == ["Service Unavailable"]
    assert refusal_lines(ApiError(502, {})) == ["the API answered 502"]
    multi = ApiError(401, {"detail": "missing\n bearer   token"})
    assert refusal_lines(multi) == ["missing bearer token"]


def test_a_transport_failure_names_the_url() -> None:
    url = "http://127.0.0.1:9"
    refused = TransportError("GET …")
    refused.__cause__ = httpx.ConnectError("[Errno 111] Connection refused")
    assert transport_line(url, refused) == (
        f"cannot connect to {url}: [Errno 111] Connection refused"
    )
    assert transport_line(url, httpx.ReadTimeout("timed out")) == f"{url} did not answer in time"
