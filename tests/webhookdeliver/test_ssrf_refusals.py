"""The SSRF guard end to end: hostile URLs and hostile DNS answers never reach a server.

Every case targets a real loopback receiver (or a forbidden address that would reach one), so a
broken guard shows up as a recorded connect or request. DNS goes through a recording resolver
that never touches the network.
"""

from __future__ import annotations

import socket

import pytest

import webhookdeliver as wd

PUBLIC_V4 = "93.184.215.14"  # a global unicast address; the tripwire stops any connect to it
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"

# (url template, expected error_kind). {p} is the loopback receiver's port.
HOSTILE_URLS: list[tuple[str, str]] = [
    ("http://127.0.0.1:{p}/", "ssrf_blocked"),
    ("http://127.0.0.1.:{p}/", "ssrf_blocked"),
    ("http://127.1:{p}/", "ssrf_blocked"),
    ("http://127.0.1:{p}/", "ssrf_blocked"),
    ("http://2130706433:{p}/", "ssrf_blocked"),
    ("http://0x7f000001:{p}/", "ssrf_blocked"),
    ("http://0x7F.0.0.1:{p}/", "ssrf_blocked"),
    ("http://0177.0.0.1:{p}/", "ssrf_blocked"),
    ("http://017700000001:{p}/", "ssrf_blocked"),
    ("http://0:{p}/", "ssrf_blocked"),
    ("http://0.0.0.0:{p}/", "ssrf_blocked"),
    ("http://[::1]:{p}/", "ssrf_blocked"),
    ("http://[0:0:0:0:0:0:0:1]:{p}/", "ssrf_blocked"),
    ("http://[::]:{p}/", "ssrf_blocked"),
    ("http://[::ffff:127.0.0.1]:{p}/", "ssrf_blocked"),
    ("http://[::ffff:7f00:1]:{p}/", "ssrf_blocked"),
    ("http://[::127.0.0.1]:{p}/", "ssrf_blocked"),
    ("http://[64:ff9b::127.0.0.1]:{p}/", "ssrf_blocked"),
    ("http://[2002:7f00:1::1]:{p}/", "ssrf_blocked"),
    ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{p}/", "ssrf_blocked"),
    ("http://[fe80::1%25lo]:{p}/", "ssrf_blocked"),
    ("http://[::1%25lo]:{p}/", "ssrf_blocked"),
    ("http://[fe80::1]:{p}/", "ssrf_blocked"),
    ("http://[fc00::1]:{p}/", "ssrf_blocked"),
    ("http://[fd12:3456::1]:{p}/", "ssrf_blocked"),
    ("http://[fec0::1]:{p}/", "ssrf_blocked"),
    ("http://[ff02::1]:{p}/", "ssrf_blocked"),
    ("http://[2001:db8::1]:{p}/", "ssrf_blocked"),
    ("http://[3fff::1]:{p}/", "ssrf_blocked"),
    ("http://[100::1]:{p}/", "ssrf_blocked"),
    ("http://[::ffff:169.254.169.254]/", "ssrf_blocked"),
    ("http://[64:ff9b::a9fe:a9fe]/", "ssrf_blocked"),
    ("http://169.254.169.254/latest/meta-data/", "ssrf_blocked"),
    ("http://0251.0376.0251.0376/", "ssrf_blocked"),
    ("http://0xa9fea9fe/", "ssrf_blocked"),
    ("http://2852039166/", "ssrf_blocked"),
    ("http://10.0.0.1/", "ssrf_blocked"),
    ("http://10.1/", "ssrf_blocked"),
    ("http://172.16.5.4/", "ssrf_blocked"),
    ("http://172.31.255.255/", "ssrf_blocked"),
    ("http://192.168.1.1/", "ssrf_blocked"),
    ("http://100.64.0.1/", "ssrf_blocked"),
    ("http://100.100.100.200/", "ssrf_blocked"),
    ("http://198.18.0.1/", "ssrf_blocked"),
    ("http://192.0.0.1/", "ssrf_blocked"),
    ("http://192.0.2.1/", "ssrf_blocked"),
    ("http://198.51.100.1/", "ssrf_blocked"),
    ("http://203.0.113.1/", "ssrf_blocked"),
    ("http://192.88.99.1/", "ssrf_blocked"),
    ("http://224.0.0.1/", "ssrf_blocked"),
    ("http://240.0.0.1/", "ssrf_blocked"),
    ("http://255.255.255.255/", "ssrf_blocked"),
    ("http://localhost:{p}/", "ssrf_blocked"),
    ("http://LocalHost:{p}/", "ssrf_blocked"),
    ("http://localhost.:{p}/", "ssrf_blocked"),
    ("http://api.localhost:{p}/", "ssrf_blocked"),
    ("http://hooks.example.com.localhost.:{p}/", "ssrf_blocked"),
    ("http://metadata.google.internal/computeMetadata/v1/", "ssrf_blocked"),
    ("http://metadata/", "ssrf_blocked"),
    ("http://anything.internal:{p}/", "ssrf_blocked"),
    ("http://printer.local/", "ssrf_blocked"),
    ("http://intranet:{p}/", "ssrf_blocked"),
    ("http://%31%32%37.0.0.1:{p}/", "ssrf_blocked"),
    ("http://user:pass@hooks.example.com:{p}/", "invalid_url"),
    ("http://hooks.example.com@127.0.0.1:{p}/", "invalid_url"),
    ("http://127.0.0.1:{p}\\@hooks.example.com/", "invalid_url"),
    ("http://127.0.0.1:{p}/\r\nHost: x", "invalid_url"),
    ("http://1.2.3.4.5/", "invalid_url"),
    ("http://1.2.3.256/", "invalid_url"),
    ("http://4294967296/", "invalid_url"),
    ("http://08.0.0.1/", "invalid_url"),
    ("ftp://hooks.example.com/", "invalid_url"),
    ("file:///etc/passwd", "invalid_url"),
    ("gopher://127.0.0.1:{p}/", "invalid_url"),
    ("javascript:alert(1)", "invalid_url"),
    ("http://", "invalid_url"),
    ("http://hooks.example.com:0/", "invalid_url"),
    ("http://hooks.example.com:99999/", "invalid_url"),
    ("http://hooks..example.com/", "invalid_url"),
    ("http://hooks_ex@mple.com/", "invalid_url"),
]

# Answers for hooks.example.com; every list holds at least one forbidden (or bogus) address.
HOSTILE_ANSWERS: list[tuple[list[str], str]] = [
    (["127.0.0.1"], "ssrf_blocked"),
    ([PUBLIC_V4, "127.0.0.1"], "ssrf_blocked"),
    (["127.0.0.1", PUBLIC_V4], "ssrf_blocked"),
    ([PUBLIC_V4, "10.0.0.5"], "ssrf_blocked"),
    ([PUBLIC_V6, "::1"], "ssrf_blocked"),
    ([PUBLIC_V6, PUBLIC_V4, "169.254.169.254"], "ssrf_blocked"),
    (["169.254.169.254"], "ssrf_blocked"),
    (["::1"], "ssrf_blocked"),
    (["::ffff:127.0.0.1"], "ssrf_blocked"),
    (["::127.0.0.1"], "ssrf_blocked"),
    (["64:ff9b::7f00:1"], "ssrf_blocked"),
    (["2002:a9fe:a9fe::1"], "ssrf_blocked"),
    (["2001::1"], "ssrf_blocked"),
    (["fd00::1"], "ssrf_blocked"),
    (["fe80::1%eth0"], "ssrf_blocked"),
    (["0.0.0.0"], "ssrf_blocked"),
    (["::"], "ssrf_blocked"),
    (["100.100.100.200"], "ssrf_blocked"),
    (["224.0.0.251"], "ssrf_blocked"),
    (["ff02::fb"], "ssrf_blocked"),
    (["192.168.0.1"], "ssrf_blocked"),
    (["172.16.0.1"], "ssrf_blocked"),
    (["198.19.255.255"], "ssrf_blocked"),
    (["255.255.255.255"], "ssrf_blocked"),
    (["not-an-ip"], "dns"),
    (["127.1"], "dns"),
    (["2130706433"], "dns"),
    ([PUBLIC_V4] * 65, "dns"),
]


class RecordingResolver:
    """Answers from a script (the last answer repeats) and records every lookup."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        return self.answers[min(len(self.calls), len(self.answers)) - 1]


def delivery(url: str) -> wd.Delivery:
    return wd.Delivery(
        url=url,
        body=b"{}",
        secrets=["whsec_c2VjcmV0"],
        webhook_id="w",
        event_type="schedule.triggered",
        attempt=1,
        timeout_seconds=2,
    )


@pytest.mark.parametrize(("template", "kind"), HOSTILE_URLS)
async def test_hostile_url_is_refused_before_any_lookup_or_connect(
    template, kind, start_receiver, connect_log
):
    receiver = await start_receiver()
    resolver = RecordingResolver(["127.0.0.1"])
    async with wd.Deliverer(resolver=resolver) as deliverer:
        result = await deliverer.deliver(delivery(template.format(p=receiver.port)))
    assert (result.error_kind, result.ok, result.retryable) == (kind, False, False), result
    assert result.status_code is None
    assert result.error_message
    assert resolver.calls == []
    assert connect_log.attempts == []
    assert receiver.requests == []
    # The same check the APIs run at creation time agrees.
    with pytest.raises(wd.InvalidTargetURL) as raised:
        wd.validate_target_url(template.format(p=receiver.port), allow_private_networks=False)
    assert isinstance(raised.value, wd.ForbiddenTargetURL) == (kind == "ssrf_blocked")


@pytest.mark.parametrize(("answers", "kind"), HOSTILE_ANSWERS)
@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_hostile_dns_answer_is_refused_without_connecting(
    answers, kind, scheme, start_receiver, connect_log
):
    receiver = await start_receiver()
    resolver = RecordingResolver(answers)
    async with wd.Deliverer(
        resolver=resolver, allowed_ports=frozenset({receiver.port})
    ) as deliverer:
        result = await deliverer.deliver(delivery(f"{scheme}://hooks.example.com:{receiver.port}/"))
    assert result.error_kind == kind, result
    assert not result.ok
    assert resolver.calls == [("hooks.example.com", receiver.port)]
    assert connect_log.attempts == []
    assert receiver.requests == []


async def test_rebinding_second_answer_is_never_used_when_private_allowed(
    start_receiver, connect_log
):
    # First answer is the receiver; any later answer would hit the tripwire if it were used.
    receiver = await start_receiver()
    resolver = RecordingResolver(["127.0.0.1"], [PUBLIC_V4])
    async with wd.Deliverer(allow_private_networks=True, resolver=resolver) as deliverer:
        result = await deliverer.deliver(delivery(f"http://hooks.example.com:{receiver.port}/"))
    assert result.ok
    assert len(resolver.calls) == 1
    assert connect_log.attempts == [("127.0.0.1", receiver.port)]


async def test_rebinding_public_then_loopback_connects_only_to_the_vetted_address(
    start_receiver, connect_log
):
    # The vetted public answer is what the connector dials (stopped at the tripwire, no packet
    # sent); the loopback second answer is never looked up, so the receiver sees nothing.
    connect_log.refusals_expected = True
    receiver = await start_receiver()
    resolver = RecordingResolver([PUBLIC_V4], ["127.0.0.1"])
    async with wd.Deliverer(
        resolver=resolver, allowed_ports=frozenset({receiver.port})
    ) as deliverer:
        result = await deliverer.deliver(delivery(f"http://hooks.example.com:{receiver.port}/"))
    assert result.error_kind == "connect"
    assert result.retryable
    assert len(resolver.calls) == 1
    assert connect_log.attempts == [(PUBLIC_V4, receiver.port)] == connect_log.refused
    assert receiver.requests == []


async def test_forbidden_first_answer_is_not_retried_with_a_fresh_lookup(start_receiver):
    receiver = await start_receiver()
    resolver = RecordingResolver(["127.0.0.1"], [PUBLIC_V4])
    async with wd.Deliverer(
        resolver=resolver, allowed_ports=frozenset({receiver.port})
    ) as deliverer:
        result = await deliverer.deliver(delivery(f"http://hooks.example.com:{receiver.port}/"))
    assert result.error_kind == "ssrf_blocked"
    assert len(resolver.calls) == 1


async def test_each_delivery_resolves_afresh_and_is_vetted_again(start_receiver, connect_log):
    # Pinning is per delivery: a later delivery sees the new (forbidden) answer and is refused.
    receiver = await start_receiver()
    resolver = RecordingResolver(["127.0.0.1"], ["10.0.0.1"])
    async with wd.Deliverer(
        resolver=resolver, allowed_ports=frozenset({receiver.port})
    ) as deliverer:
        first = await deliverer.deliver(delivery(f"http://hooks.example.com:{receiver.port}/"))
        second = await deliverer.deliver(delivery(f"http://hooks.example.com:{receiver.port}/"))
    assert first.error_kind == second.error_kind == "ssrf_blocked"
    assert "10.0.0.1" in (second.error_message or "")


def test_tripwire_refuses_non_loopback_connects(connect_log):
    connect_log.refusals_expected = True
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(ConnectionRefusedError):
            sock.connect(("192.0.2.1", 9))
    finally:
        sock.close()
    assert connect_log.refused == [("192.0.2.1", 9)]


def test_there_are_at_least_sixty_hostile_cases():
    assert len(HOSTILE_URLS) + len(HOSTILE_ANSWERS) >= 60


METADATA_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[fe80::1]/",
    "http://[fd00:ec2::254]/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata/",
]


@pytest.mark.parametrize("url", METADATA_URLS)
async def test_metadata_targets_stay_refused_with_private_networks_allowed(url, connect_log):
    """Tests and demos allow loopback/private targets, never cloud metadata endpoints."""
    resolver = RecordingResolver(["127.0.0.1"])
    async with wd.Deliverer(allow_private_networks=True, resolver=resolver) as deliverer:
        result = await deliverer.deliver(delivery(url))
    assert result.error_kind == "ssrf_blocked", result
    assert resolver.calls == []
    assert connect_log.attempts == []
    with pytest.raises(wd.ForbiddenTargetURL):
        wd.validate_target_url(url, allow_private_networks=True)


@pytest.mark.parametrize("answer", ["169.254.169.254", "::ffff:169.254.169.254", "fe80::1"])
async def test_metadata_dns_answer_refused_with_private_networks_allowed(
    answer, start_receiver, connect_log
):
    receiver = await start_receiver()
    resolver = RecordingResolver(["127.0.0.1", answer])
    async with wd.Deliverer(allow_private_networks=True, resolver=resolver) as deliverer:
        result = await deliverer.deliver(delivery(f"http://hooks.example.com:{receiver.port}/"))
    assert result.error_kind == "ssrf_blocked", result
    assert connect_log.attempts == []
    assert receiver.requests == []


def _spelled(port: int, digits: str) -> str:
    return "".join(digits[int(d)] for d in str(port))


ARABIC_INDIC = "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669"
FULLWIDTH = "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19"


@pytest.mark.parametrize(
    "spell",
    [
        lambda p: f"+{p}",
        lambda p: _spelled(p, ARABIC_INDIC),
        lambda p: _spelled(p, FULLWIDTH),
        lambda p: f"{str(p)[:1]}_{str(p)[1:]}",
    ],
    ids=["plus", "arabic-indic", "fullwidth", "underscore"],
)
async def test_a_port_spelled_otherwise_than_ascii_digits_is_not_delivered_to(
    spell, start_receiver, connect_log
):
    receiver = await start_receiver()
    url = f"http://127.0.0.1:{spell(receiver.port)}/hook"
    async with wd.Deliverer(allow_private_networks=True) as deliverer:
        result = await deliverer.deliver(delivery(url))
    assert (result.error_kind, result.ok, result.retryable) == ("invalid_url", False, False)
    assert connect_log.attempts == []
    assert receiver.requests == []


async def test_a_port_outside_the_allow_list_is_refused_at_send_time(start_receiver, connect_log):
    """The rules may have tightened since the URL was saved: the deliverer checks the port
    again, before any lookup or connect (ssrf_blocked, not retried)."""
    receiver = await start_receiver()
    resolver = RecordingResolver(["127.0.0.1"])
    url = f"http://hooks.example.com:{receiver.port}/"
    async with wd.Deliverer(
        allow_private_networks=True, resolver=resolver, allowed_ports=frozenset({443})
    ) as deliverer:
        refused = await deliverer.deliver(delivery(url))
    assert refused.error_kind == "ssrf_blocked", refused
    assert not refused.retryable
    assert f"port {receiver.port} is not allowed" in (refused.error_message or "")
    assert resolver.calls == []
    assert connect_log.attempts == []
    assert receiver.requests == []
    # The same URL with its port allowed goes through, so the refusal was the port's.
    async with wd.Deliverer(
        allow_private_networks=True, resolver=resolver, allowed_ports=frozenset({receiver.port})
    ) as deliverer:
        assert (await deliverer.deliver(delivery(url))).ok


async def test_production_refuses_a_non_web_port_without_a_lookup(connect_log):
    resolver = RecordingResolver([PUBLIC_V4])
    async with wd.Deliverer(resolver=resolver) as deliverer:
        result = await deliverer.deliver(delivery("https://hooks.example.com:8443/"))
    assert result.error_kind == "ssrf_blocked"
    assert resolver.calls == []
    assert connect_log.attempts == []
