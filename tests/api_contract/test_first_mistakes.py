"""One API style across both services, over real HTTP on PostgreSQL: one validation-problem
shape and one `type` scheme, malformed JSON 400 with line and column, 415 without a JSON
Content-Type, collections with or without the trailing slash, 405 listing the path's methods,
NaN / non-ASCII header values / control characters refused, and an OpenAPI document that
files every error under application/problem+json."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from servicekit.http.problems import PROBLEM_MEDIA_TYPE, TYPE_PREFIX
from tests.api_contract.conftest import Served, bearer

SCHEDULE = {
    "name": "nightly-report",
    "cron": "0 3 * * 1-5",
    "timezone": "Africa/Addis_Ababa",
    "target": {"url": "https://example.com/hook"},
    "payload": {"report": "daily"},
}
HOOK = "https://example.com/hook"
SUBSCRIPTION = {"url": "https://example.com/hook", "event_types": ["schedule.*"]}


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=15, headers=bearer(), follow_redirects=False) as client:
        yield client


def _problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM_MEDIA_TYPE
    body: dict[str, Any] = r.json()
    assert body["type"].startswith(TYPE_PREFIX)
    assert body["status"] == status
    return body


def _assert_validation_shape(body: dict[str, Any], field: str) -> None:
    assert body["type"] == TYPE_PREFIX + "validation-error"
    assert body["field"] == field
    assert body["errors"][0]["field"] == field
    assert all(set(e) == {"field", "detail"} for e in body["errors"])
    assert body["detail"] == f"{field}: {body['errors'][0]['detail']}"


def test_one_validation_shape_in_both_services(
    http: httpx.Client, scheduler_server: Served, notification_server: Served
) -> None:
    s, n = scheduler_server.base_url, notification_server.base_url
    # Refused by the schema...
    bad_schema = http.post(f"{s}/v1/schedules/", json={**SCHEDULE, "name": ""})
    _assert_validation_shape(_problem(bad_schema, 422), "name")
    bad_schema = http.post(f"{n}/v1/subscriptions/", json={**SUBSCRIPTION, "url": ""})
    _assert_validation_shape(_problem(bad_schema, 422), "url")
    # ...and by a rule past the schema (the SSRF guard): the same shape.
    private = {"url": "http://10.0.0.1/hook"}
    bad_rule = http.post(f"{s}/v1/schedules/", json={**SCHEDULE, "target": private})
    _assert_validation_shape(_problem(bad_rule, 422), "target.url")
    bad_rule = http.post(f"{n}/v1/subscriptions/", json={**SUBSCRIPTION, **private})
    _assert_validation_shape(_problem(bad_rule, 422), "url")


@pytest.mark.parametrize(
    ("service", "method", "path"),
    [
        ("scheduler", "POST", "/v1/schedules/"),
        ("notification", "POST", "/v1/subscriptions/"),
        ("notification", "PUT", "/v1/alert-contacts"),
    ],
)
def test_malformed_json_is_400_naming_line_and_column(
    http: httpx.Client, request: pytest.FixtureRequest, service: str, method: str, path: str
) -> None:
    served: Served = request.getfixturevalue(f"{service}_server")
    r = http.request(
        method,
        served.base_url + path,
        content=b'{\n  "name": "x",\n  "cron": 0 3 * * *\n}',
        headers={"Content-Type": "application/json"},
    )
    body = _problem(r, 400)
    assert body["type"] == TYPE_PREFIX + "invalid-json"
    assert (body["line"], body["column"]) == (3, 13)
    assert "line 3, column 13" in body["detail"]


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
@pytest.mark.parametrize(
    ("service", "method", "path", "json_body"),
    [
        ("scheduler", "POST", "/v1/schedules/", SCHEDULE),
        ("notification", "POST", "/v1/subscriptions/", SUBSCRIPTION),
    ],
)
def test_body_without_json_content_type_is_415(
    http: httpx.Client,
    request: pytest.FixtureRequest,
    service: str,
    method: str,
    path: str,
    json_body: dict[str, Any],
    content_type: str | None,
) -> None:
    import json

    served: Served = request.getfixturevalue(f"{service}_server")
    headers = {"Content-Type": content_type} if content_type else {}
    content = json.dumps(json_body).encode()
    r = http.request(method, served.base_url + path, content=content, headers=headers)
    body = _problem(r, 415)
    assert body["type"] == TYPE_PREFIX + "unsupported-media-type"
    assert "Content-Type: application/json" in body["detail"]


@pytest.mark.parametrize(
    ("service", "collection"),
    [
        ("scheduler", "/v1/schedules"),
        ("notification", "/v1/subscriptions"),
        ("notification", "/v1/notifications"),
        ("notification", "/v1/alert-contacts/"),  # declared without the slash: the other way
    ],
)
def test_collections_answer_with_or_without_the_slash(
    http: httpx.Client, request: pytest.FixtureRequest, service: str, collection: str
) -> None:
    served: Served = request.getfixturevalue(f"{service}_server")
    r = http.get(served.base_url + collection)
    assert r.status_code == 200, (r.status_code, r.headers.get("location"))  # not a 307
    assert r.json() == http.get(served.base_url + collection.rstrip("/") + "/").json() or (
        collection.endswith("/")
    )


def test_create_without_the_slash_creates(
    http: httpx.Client, scheduler_server: Served, notification_server: Served
) -> None:
    created = http.post(f"{scheduler_server.base_url}/v1/schedules", json=SCHEDULE)
    assert created.status_code == 201, created.text
    assert created.json()["name"] == SCHEDULE["name"]
    created = http.post(f"{notification_server.base_url}/v1/subscriptions", json=SUBSCRIPTION)
    assert created.status_code == 201, created.text


@pytest.mark.parametrize(
    ("service", "path", "allow"),
    [
        ("scheduler", "/v1/schedules/sch_x", "DELETE, GET, PATCH"),
        ("scheduler", "/v1/schedules", "GET, POST"),
        ("notification", "/v1/subscriptions/sub_x", "DELETE, GET, PATCH"),
        ("notification", "/v1/alert-contacts", "GET, PUT"),
    ],
)
def test_405_allow_lists_every_method_of_the_path(
    http: httpx.Client, request: pytest.FixtureRequest, service: str, path: str, allow: str
) -> None:
    served: Served = request.getfixturevalue(f"{service}_server")
    r = http.request("PUT" if "PUT" not in allow else "POST", served.base_url + path)
    _problem(r, 405)
    assert r.headers["allow"] == allow


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"payload": {"x": float("nan")}}, "payload"),
        ({"payload": [1, {"deep": float("inf")}]}, "payload"),
        ({"payload": {"k": "a\x00b"}}, "payload"),
        ({"name": "night\x00ly"}, "name"),
        ({"name": "night\nly"}, "name"),
        ({"timezone": "UTC\x00"}, "timezone"),
        ({"target": {"url": "https://example.com/h\x00"}}, "target.url"),
        ({"target": {"url": HOOK, "headers": {"X-Team": "équipe"}}}, "target.headers"),
        ({"target": {"url": HOOK, "headers": {"X Team": "ops"}}}, "target.headers"),
        ({"target": {"url": HOOK, "headers": {"X-Team": "a\x00"}}}, "target.headers"),
        ({"retry_policy": {"max_attempts": "3"}}, "retry_policy.max_attempts"),
    ],
)  # fmt: skip
def test_scheduler_refuses_what_it_cannot_store_or_send(
    http: httpx.Client, scheduler_server: Served, override: dict[str, Any], field: str
) -> None:
    import json

    content = json.dumps({**SCHEDULE, **override}).encode()  # NaN and Infinity as bare tokens
    r = http.post(
        f"{scheduler_server.base_url}/v1/schedules/",
        content=content,
        headers={"Content-Type": "application/json"},
    )
    body = _problem(r, 422)
    assert body["field"] == field, body
    if field == "target.headers":
        assert "X" in body["detail"]  # names the header


def test_non_ascii_header_value_is_refused_naming_the_header(
    http: httpx.Client, scheduler_server: Served
) -> None:
    target = {"url": "https://example.com/", "headers": {"X-Team": "équipe"}}
    r = http.post(f"{scheduler_server.base_url}/v1/schedules/", json={**SCHEDULE, "target": target})
    body = _problem(r, 422)
    assert "'X-Team'" in body["detail"]
    assert "ASCII" in body["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "https://example.com/\x00", "event_types": ["schedule.*"]}, "url"),
        ({"url": "https://example.com/", "event_types": ["schedule.\x00"]}, "event_types[0]"),
        ({**SUBSCRIPTION, "description": "ops\x00"}, "description"),
        ({**SUBSCRIPTION, "enabled": "yes"}, "enabled"),
    ],
)
def test_notification_refuses_control_characters(
    http: httpx.Client, notification_server: Served, body: dict[str, Any], field: str
) -> None:
    r = http.post(f"{notification_server.base_url}/v1/subscriptions/", json=body)
    assert _problem(r, 422)["field"] == field


def test_notification_description_keeps_tab_and_newline(
    http: httpx.Client, notification_server: Served
) -> None:
    r = http.post(
        f"{notification_server.base_url}/v1/subscriptions/",
        # Its own url: the server is shared, and an exact duplicate is refused (409).
        json={
            **SUBSCRIPTION,
            "url": "https://example.com/described",
            "description": "ops\tteam\nsecond line",
        },
    )
    assert r.status_code == 201, r.text
    assert r.json()["description"] == "ops\tteam\nsecond line"


@pytest.mark.parametrize("email", ["ops\x00@example.com", "ops@exa\x1bmple.com"])
def test_alert_contact_with_a_control_character_is_refused(
    http: httpx.Client, notification_server: Served, email: str
) -> None:
    r = http.put(f"{notification_server.base_url}/v1/alert-contacts", json={"emails": [email]})
    assert _problem(r, 422)["field"] == "emails[0]"


@pytest.mark.parametrize(
    ("service", "path"),
    [
        ("scheduler", "/v1/schedules/%00"),
        ("scheduler", "/v1/schedules/sch_x/runs/%00"),
        ("notification", "/v1/subscriptions/%00"),
        ("notification", "/v1/subscriptions/sub_x/deliveries"),  # a well-formed missing id: 404
    ],
)
def test_path_ids_with_control_characters_are_refused(
    http: httpx.Client, request: pytest.FixtureRequest, service: str, path: str
) -> None:
    served: Served = request.getfixturevalue(f"{service}_server")
    r = http.get(served.base_url + path)
    assert r.status_code in (404, 422), r.text
    assert r.headers["content-type"] == PROBLEM_MEDIA_TYPE
    assert (r.status_code == 422) == ("%00" in path)


@pytest.mark.parametrize("to", ["0.5", "1700000000", "2026-03-08T07:00:00", "2026-03-08"])
def test_run_filters_need_rfc3339_with_an_offset(
    http: httpx.Client, scheduler_server: Served, to: str
) -> None:
    r = http.get(f"{scheduler_server.base_url}/v1/schedules/-/runs", params={"to": to})
    assert _problem(r, 422)["field"] == "to"
    ok = http.get(
        f"{scheduler_server.base_url}/v1/schedules/-/runs", params={"to": "2026-03-08T07:00:00Z"}
    )
    assert ok.status_code == 200, ok.text


def test_patch_schemas_allow_null_only_where_it_means_something(
    scheduler_server: Served, notification_server: Served
) -> None:
    def nullable(spec: dict[str, Any], model: str) -> set[str]:
        schemas: dict[str, Any] = spec["components"]["schemas"]
        props = schemas[model]["properties"]
        return {
            name
            for name, prop in props.items()
            if any(alt.get("type") == "null" for alt in prop.get("anyOf", []))
            or prop.get("type") == "null"
        }

    never_null = {"name", "timezone", "action", "retry_policy", "breaker", "misfire_policy"}
    assert never_null.isdisjoint(nullable(scheduler_server.openapi, "SchedulePatch"))
    assert nullable(notification_server.openapi, "SubscriptionPatch") == {"description"}


def _responses(spec: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                yield path, method, status, response


@pytest.mark.parametrize("service", ["scheduler", "notification"])
def test_openapi_files_every_error_under_problem_json(
    request: pytest.FixtureRequest, service: str
) -> None:
    spec: dict[str, Any] = request.getfixturevalue(f"{service}_server").openapi
    for path, method, status, response in _responses(spec):
        if int(status) >= 400:
            assert list(response.get("content", {})) == [PROBLEM_MEDIA_TYPE], (path, method, status)
    for path, operations in spec["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in operations.items():
            documented = set(operation["responses"])
            # The completion call has no tenant token: no 403, and an unknown run is a 401.
            tenant = (path, method) != ("/v1/runs/{run_id}/complete", "post")
            assert {"401", "422", "503"} <= documented, (path, method)
            assert not tenant or {"403", "404"} <= documented, (path, method)
            if "requestBody" in operation:
                assert {"400", "413", "415"} <= documented, (path, method)
            if any(p["name"] == "cursor" for p in operation.get("parameters", [])):
                assert "400" in documented, (path, method)


def test_openapi_documents_the_idempotent_replay(scheduler_server: Served) -> None:
    spec: dict[str, Any] = scheduler_server.openapi
    create = spec["paths"]["/v1/schedules/"]["post"]["responses"]
    assert {"200", "201"} <= set(create)
    assert "Idempotent" in create["200"]["description"]
