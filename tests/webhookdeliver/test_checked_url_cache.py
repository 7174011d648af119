"""The deliverer remembers a URL's static check (webhookdeliver.deliverer._checked_url): the
remembered verdict must depend on the private-networks setting too, and a remembered refusal
must stay a refusal on every later attempt, with no connect."""

from __future__ import annotations

import base64

import webhookdeliver as wd

SECRET = "whsec_" + base64.b64encode(b"c" * 32).decode()


def delivery(url: str) -> wd.Delivery:
    return wd.Delivery(
        url=url, body=b"{}", secrets=[SECRET], webhook_id="evt_1", event_type="t", attempt=1
    )


async def test_a_url_allowed_for_one_deliverer_stays_refused_for_a_stricter_one(
    start_receiver, connect_log
):
    receiver = await start_receiver()
    url = receiver.url()  # 127.0.0.1: allowed only with private networks allowed
    async with wd.Deliverer(allow_private_networks=True) as lenient:
        assert (await lenient.deliver(delivery(url))).ok
    async with wd.Deliverer(allow_private_networks=False) as strict:
        for _ in range(2):
            refused = await strict.deliver(delivery(url))
            assert refused.error_kind == "ssrf_blocked"
            assert refused.retryable is False
            assert "127.0.0.1" in (refused.error_message or "")
    async with wd.Deliverer(allow_private_networks=True) as lenient:
        assert (await lenient.deliver(delivery(url))).ok
    assert len(receiver.requests) == 2  # the strict deliverer reached nothing


async def test_a_remembered_invalid_url_is_refused_each_time_with_its_reason():
    async with wd.Deliverer() as deliverer:
        results = [await deliverer.deliver(delivery("ftp://hooks.example.com/")) for _ in "ab"]
    assert [r.error_kind for r in results] == ["invalid_url", "invalid_url"]
    assert all("scheme" in (r.error_message or "") for r in results)


async def test_an_over_long_url_is_refused_each_time():
    url = "https://hooks.example.com/" + "a" * 5000
    async with wd.Deliverer() as deliverer:
        results = [await deliverer.deliver(delivery(url)) for _ in "ab"]
    assert [r.error_kind for r in results] == ["invalid_url", "invalid_url"]
