"""The deny table and numeric host parsing, checked address by address."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import webhookdeliver as wd
from webhookdeliver.addresses import FORBIDDEN_IPV4_NETWORKS, parse_numeric_ipv4

FORBIDDEN = [
    "0.0.0.0",
    "0.255.255.255",
    "10.0.0.0",
    "10.255.255.255",
    "100.64.0.0",
    "100.127.255.255",
    "127.0.0.1",
    "127.255.255.254",
    "169.254.169.254",
    "172.16.0.0",
    "172.31.255.255",
    "192.0.0.8",
    "192.0.2.255",
    "192.88.99.1",
    "192.168.255.255",
    "198.18.0.0",
    "198.19.255.255",
    "198.51.100.7",
    "203.0.113.200",
    "224.0.0.0",
    "239.255.255.255",
    "233.252.0.1",
    "240.0.0.0",
    "255.255.255.255",
    "::",
    "::1",
    "::ffff:127.0.0.1",
    "::ffff:8.8.8.8",
    "::7f00:1",
    "64:ff9b::a00:1",
    "64:ff9b:1::1",
    "2002:c0a8:101::",
    "2002:7f00:1::",
    "2001::",
    "2001:0:4136:e378::1",
    "2001:2::1",
    "2001:10::1",
    "2001:db8::",
    "3fff::1",
    "5f00::1",
    "100::",
    "fc00::",
    "fd00::1",
    "fe80::1",
    "febf::1",
    "fec0::1",
    "ff02::1",
    "ff0e::1",
    "4000::1",
    "::2",
    "fe80::1%eth0",
    "not an ip",
    "",
]
ALLOWED = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "100.63.255.255",
    "100.128.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "192.167.255.255",
    "192.169.0.0",
    "198.17.255.255",
    "198.20.0.0",
    "223.255.255.255",
    "11.0.0.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001:82a::200e",
    "64:ff9b::808:808",
    "2002:808:808::1",
    "2400:cb00::1",
]


@pytest.mark.parametrize("ip", FORBIDDEN)
def test_forbidden(ip):
    assert wd.is_forbidden_address(ip)
    assert wd.forbidden_reason(ip)


@pytest.mark.parametrize("ip", ALLOWED)
def test_allowed(ip):
    assert not wd.is_forbidden_address(ip), wd.forbidden_reason(ip)


def test_table_is_stricter_than_ipaddress_where_ipaddress_is_wrong():
    # CGNAT is not private to ipaddress, multicast is not "private" either: our table says no.
    assert not ipaddress.ip_address("100.64.0.1").is_private
    assert wd.is_forbidden_address("100.64.0.1")
    assert not ipaddress.ip_address("224.0.0.1").is_private
    assert wd.is_forbidden_address("224.0.0.1")


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_v4_embeddings_inherit_the_verdict(value):
    # Any IPv4 verdict carries over to its NAT64 and 6to4 forms; mapped forms are always denied.
    v4 = ipaddress.IPv4Address(value)
    verdict = wd.is_forbidden_address(str(v4))
    assert wd.is_forbidden_address(str(ipaddress.IPv6Address((0x64FF9B << 96) | value))) == verdict
    assert wd.is_forbidden_address(str(ipaddress.IPv6Address((0x2002 << 112) | (value << 80)))) == (
        verdict
    )
    assert wd.is_forbidden_address(f"::ffff:{v4}")
    assert verdict == any(v4 in net for net, _ in FORBIDDEN_IPV4_NETWORKS)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0x7F.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("10.1", "10.0.0.1"),
        ("1.2.65535", "1.2.255.255"),
        ("8.8.8.8.", "8.8.8.8"),
        ("example.com", None),
        ("1.2.3.com", None),
        ("1.0x1g", None),
        ("0x", "0.0.0.0"),
    ],
)
def test_numeric_spellings_are_normalised(host, expected):
    parsed = parse_numeric_ipv4(host)
    assert (None if parsed is None else str(parsed)) == expected


@pytest.mark.parametrize(
    "host", ["1.2.3.256", "4294967296", "1.2.3.4.5", "08", "1.0x1g.2", "1.2.65536"]
)
def test_numeric_spellings_that_do_not_fit_raise(host):
    with pytest.raises(ValueError):
        parse_numeric_ipv4(host)
