"""The blocking client against the real scheduler API on loopback: every schedule operation the
CLI uses, the answers as typed models, and the API's refusals as `ApiError`."""

from __future__ import annotations

import httpx
import pytest

from schedulerclient import ApiError, Client
from schedulerclient.models import RunOut, ScheduleOut, ScheduleWithSecret
from tests.schedulerclient.conftest import schedule_fields, token_for


class Recording(httpx.BaseTransport):
    """The real network transport, keeping every request it sent."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def test_create_returns_the_schedule_and_its_secret_and_sends_an_idempotency_key(
    servers: tuple[str, str], tenant: str
) -> None:
    recording = Recording()
    token = token_for(tenant)
    with Client(servers[0], token, transport=recording) as client:
        created = client.create_schedule(**schedule_fields(labels={"team": "billing"}))
    assert isinstance(created, ScheduleWithSecret)
    assert created.id.startswith("sch_")
    assert created.labels == {"team": "billing"}
    assert created.secret is not None
    assert created.secret.startswith("whsec_")
    assert created.secret not in repr(created)
    (request,) = recording.sent
    assert len(request.headers["Idempotency-Key"]) >= 32
    assert request.headers["Authorization"] == f"Bearer {token}"
    assert token not in repr(client)


def test_an_idempotency_key_given_twice_replays_the_same_schedule(client: Client) -> None:
    first = client.create_schedule(schedule_fields(), idempotency_key="create-once-1")
    again = client.create_schedule(schedule_fields(), idempotency_key="create-once-1")
    assert again.id == first.id
    assert [s.id for s in client.iter_schedules()] == [first.id]


def test_get_update_delete(client: Client) -> None:
    created = client.create_schedule(**schedule_fields())
    got = client.get_schedule(created.id)
    assert isinstance(got, ScheduleOut)
    assert (got.name, got.cron, got.state) == ("nightly-report", "0 3 * * 1-5", "active")
    updated = client.update_schedule(created.id, name="renamed", description=None)
    assert updated.name == "renamed"
    assert updated.version > got.version
    assert client.get_schedule(created.id).name == "renamed"
    assert client.delete_schedule(created.id) is None
    with pytest.raises(ApiError) as err:
        client.get_schedule(created.id)
    assert err.value.status == 404


def test_list_filters_by_label_and_the_iterator_follows_every_page(client: Client) -> None:
    billing = [
        client.create_schedule(**schedule_fields(name=f"b{i}", labels={"team": "billing"})).id
        for i in range(5)
    ]
    client.create_schedule(**schedule_fields(name="ops", labels={"team": "ops"}))
    page = client.list_schedules(label=["team=billing"], limit=2)
    assert len(page.items) == 2
    assert page.next_cursor is not None
    every = [s.id for s in client.iter_schedules(label=["team=billing"], limit=2)]
    assert sorted(every) == sorted(billing)  # 3 pages of 2, 2 and 1
    assert len(list(client.iter_schedules(limit=2))) == 6


def test_pause_resume_trigger_and_runs(client: Client) -> None:
    created = client.create_schedule(**schedule_fields())
    paused = client.pause_schedule(created.id, reason="maintenance")
    assert (paused.state, paused.paused_reason) == ("paused", "maintenance")
    assert client.resume_schedule(created.id).state == "active"
    run = client.trigger_schedule(created.id)
    assert isinstance(run, RunOut)
    assert (run.trigger, run.schedule_id) == ("manual", created.id)
    runs = client.list_runs(created.id)
    assert [r.id for r in runs.items] == [run.id]
    assert [r.id for r in client.iter_tenant_runs(trigger="manual")] == [run.id]
    assert client.get_run(created.id, run.id).id == run.id


def test_put_by_key_creates_then_leaves_an_unchanged_definition_alone(client: Client) -> None:
    definition = schedule_fields(labels={"app": "billing"})
    created = client.put_schedule_by_key("billing/nightly", definition)
    assert created.key == "billing/nightly"
    assert created.secret is not None
    again = client.put_schedule_by_key("billing/nightly", definition)
    assert (again.id, again.version, again.updated_at) == (
        created.id,
        created.version,
        created.updated_at,
    )
    changed = client.put_schedule_by_key("billing/nightly", definition, cron="0 4 * * *")
    assert (changed.id, changed.cron) == (created.id, "0 4 * * *")
    assert changed.version > created.version
    assert [s.id for s in client.iter_schedules(key="billing/nightly")] == [created.id]


def test_a_missing_schedule_is_an_api_error_with_the_problem(client: Client) -> None:
    with pytest.raises(ApiError) as err:
        client.get_schedule("sch_01J00000000000000000000000")
    e = err.value
    assert e.status == 404
    assert e.slug == "not-found"
    assert e.type is not None
    assert e.type.endswith("/not-found")
    assert e.instance == "/v1/schedules/sch_01J00000000000000000000000"
    assert str(e) == e.detail


def test_an_invalid_definition_is_a_422_naming_each_field(client: Client) -> None:
    with pytest.raises(ApiError) as err:
        client.create_schedule(**schedule_fields(cron="not a cron", target={}))
    e = err.value
    assert e.status == 422
    assert e.slug == "validation-error"
    fields = {item["field"] for item in e.errors}
    assert "target.url" in fields
    assert e.field in fields
    assert str(e) == e.detail
    assert "\n" not in str(e)
