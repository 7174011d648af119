"""`AsyncClient`: the same operations as `Client`, awaited, against the real apps in-process;
and the notification API through either client."""

from __future__ import annotations

import inspect

import pytest

from schedulerclient import ApiError, AsyncClient, Client
from schedulerclient.models import SubscriptionOut
from tests.schedulerclient.conftest import schedule_fields


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_both_clients_offer_the_same_methods_with_the_same_arguments() -> None:
    sync, asynchronous = _public(Client), _public(AsyncClient)
    assert set(sync) - {"close"} == set(asynchronous) - {"aclose"}
    for name, signature in sync.items():
        if name == "close":
            continue
        theirs = asynchronous[name]
        assert list(theirs.parameters.values()) == list(signature.parameters.values()), name
        if name.startswith(("iter_", "from_", "env_")):
            continue
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name


async def test_schedules_through_the_async_client(aclient: AsyncClient) -> None:
    created = await aclient.create_schedule(**schedule_fields(labels={"team": "billing"}))
    assert created.secret is not None
    assert (await aclient.get_schedule(created.id)).name == "nightly-report"
    for i in range(4):
        await aclient.create_schedule(**schedule_fields(name=f"b{i}", labels={"team": "billing"}))
    await aclient.create_schedule(**schedule_fields(name="other"))
    ids = [s.id async for s in aclient.iter_schedules(label=["team=billing"], limit=2)]
    assert len(ids) == len(set(ids)) == 5
    assert created.id in ids
    assert (await aclient.update_schedule(created.id, cron="0 4 * * *")).cron == "0 4 * * *"
    assert (await aclient.pause_schedule(created.id)).state == "paused"
    assert (await aclient.resume_schedule(created.id)).state == "active"
    run = await aclient.trigger_schedule(created.id)
    assert [r.id async for r in aclient.iter_runs(created.id)] == [run.id]
    put = await aclient.put_schedule_by_key("k1", schedule_fields())
    assert put.key == "k1"
    await aclient.delete_schedule(created.id)
    with pytest.raises(ApiError) as err:
        await aclient.get_schedule(created.id)
    assert err.value.status == 404


async def test_notification_operations_go_to_the_notification_api(aclient: AsyncClient) -> None:
    created = await aclient.create_subscription(
        url="https://example.com/events", event_types=["schedule.*"], description="ops"
    )
    assert created.secret is not None
    assert created.secret not in repr(created)
    listed = [s async for s in aclient.iter_subscriptions()]
    assert [s.id for s in listed] == [created.id]
    assert isinstance(listed[0], SubscriptionOut)
    contacts = await aclient.put_alert_contacts(emails=["ops@example.com"])
    assert contacts.emails == ["ops@example.com"]
    assert (await aclient.get_alert_contacts()).emails == ["ops@example.com"]
    assert (await aclient.list_notifications()).items == []
    health = await aclient.get_notification_health()
    assert health["status"] == "ok"
    with pytest.raises(ApiError) as err:
        await aclient.create_subscription(url="https://example.com/events", event_types=[])
    assert err.value.status == 422
    assert err.value.field == "event_types"


def test_the_blocking_client_reaches_the_notification_server(client: Client) -> None:
    created = client.create_subscription(url="https://example.com/e", event_types=["schedule.*"])
    assert client.get_subscription(created.id).url == "https://example.com/e"
    assert client.update_subscription(created.id, enabled=False).enabled is False
    client.delete_subscription(created.id)
    assert list(client.iter_subscriptions()) == []
