"""validate_target_url: what the APIs accept at creation time (no DNS involved)."""

from __future__ import annotations

import pytest

import webhookdeliver as wd


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/x?y=1",
        "http://hooks.example.com:8080/",
        "https://HOOKS.Example.COM./path",
        "https://bücher.example/",
        "https://8.8.8.8/",
        "https://[2606:4700:4700::1111]:8443/",
        "https://a-b_c.example.com/",
    ],
)
def test_public_targets_are_accepted(url):
    wd.validate_target_url(
        url, allow_private_networks=False, allowed_ports=frozenset({80, 443, 8080, 8443})
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com:8443/",
        "http://hooks.example.com:8080/",
        "https://8.8.8.8:25/",
        "https://[2606:4700:4700::1111]:8443/",
    ],
)
def test_ports_outside_the_web_ports_are_refused_in_production(url):
    # What the egress NetworkPolicy opens: another port would pass here and then hang to its
    # connect timeout on every attempt.
    with pytest.raises(wd.ForbiddenTargetURL) as raised:
        wd.validate_target_url(url, allow_private_networks=False)
    assert "is not allowed (allowed: 80, 443)" in raised.value.reason


def test_default_ports_are_the_web_ports_and_any_port_with_private_networks():
    assert frozenset({80, 443}) == wd.DEFAULT_ALLOWED_PORTS
    for url in ("https://hooks.example.com/", "http://hooks.example.com/", "http://h.example:443/"):
        wd.validate_target_url(url, allow_private_networks=False)
    # Dev and tests: loopback receivers listen on random ports.
    wd.validate_target_url("http://127.0.0.1:54321/", allow_private_networks=True)
    wd.validate_target_url("https://hooks.example.com:8443/", allow_private_networks=True)


def test_a_configured_allow_list_applies_in_both_modes():
    ports = wd.parse_allowed_ports(" 443, 8443 ")
    assert ports == frozenset({443, 8443})
    for private in (False, True):
        wd.validate_target_url(
            "https://hooks.example.com:8443/", allow_private_networks=private, allowed_ports=ports
        )
        with pytest.raises(wd.ForbiddenTargetURL, match="port 80 is not allowed"):
            wd.validate_target_url(
                "http://hooks.example.com/", allow_private_networks=private, allowed_ports=ports
            )


def test_the_host_is_judged_before_the_port():
    with pytest.raises(wd.ForbiddenTargetURL, match=r"169\.254\.169\.254"):
        wd.validate_target_url("http://169.254.169.254:8080/", allow_private_networks=False)


@pytest.mark.parametrize("text", ["", "80,", "http", "0", "65536", "+80", "80;443", "\uff18\uff10"])
def test_a_malformed_port_list_is_refused(text):
    with pytest.raises(ValueError):
        wd.parse_allowed_ports(text)


@pytest.mark.parametrize(("value", "parsed"), [("80,443", {80, 443}), ("  ", None), (None, None)])
def test_the_settings_validator_reads_text_and_blank_as_unset(value, parsed):
    got = wd.allowed_ports_setting(value)
    assert got == (None if parsed is None else frozenset(parsed))


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8080/",
        "http://127.0.0.1:1/",
        "http://[::1]/",
        "http://10.0.0.1/",
        "http://receiver/",
        "http://api.localhost/",
    ],
)
def test_private_targets_only_with_the_flag(url):
    with pytest.raises(wd.ForbiddenTargetURL):
        wd.validate_target_url(url, allow_private_networks=False)
    wd.validate_target_url(url, allow_private_networks=True)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.1/",
        "http://2130706433/",
        "ftp://x.example/",
        "http://u@x.example/",
        "http://[fe80::1%25eth0]/",
        "http://x.example/" + "a" * 2100,
    ],
)
def test_some_urls_are_refused_even_with_the_flag(url):
    # Non-canonical numbers, other schemes, credentials, zone ids and giant URLs never pass.
    with pytest.raises(wd.InvalidTargetURL):
        wd.validate_target_url(url, allow_private_networks=True)


def test_refusal_carries_a_reason():
    with pytest.raises(wd.ForbiddenTargetURL) as raised:
        wd.validate_target_url("http://169.254.169.254/", allow_private_networks=False)
    assert "link-local" in raised.value.reason


# Spellings of 80 that Python's int() (and so yarl) reads as 80, and others no parser agrees on.
ODD_PORTS = ["+80", "\u0668\u0660", "\uff18\uff10", "8_0", " 80", "0x50", "-80", "80\u0660", ""]


@pytest.mark.parametrize("port", ODD_PORTS)
@pytest.mark.parametrize("host", ["hooks.example.com", "8.8.8.8", "[2606:4700:4700::1111]"])
def test_a_port_that_is_not_ascii_digits_is_refused(host, port):
    with pytest.raises(wd.InvalidTargetURL) as raised:
        wd.validate_target_url(f"https://{host}:{port}/x", allow_private_networks=True)
    assert not isinstance(raised.value, wd.ForbiddenTargetURL)


@pytest.mark.parametrize("port", ["1", "80", "08080", "65535"])
def test_ascii_digit_ports_are_accepted(port):
    wd.validate_target_url(
        f"https://hooks.example.com:{port}/a:b?c=:1",
        allow_private_networks=False,
        allowed_ports=frozenset({int(port)}),
    )


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("https://Hooks.Example.com/a", "hooks.example.com:443"),
        ("http://hooks.example.com/a", "hooks.example.com:80"),
        ("https://hooks.example.com:8443/a?x=1", "hooks.example.com:8443"),
        ("https://user:pw@hooks.example.com/", "hooks.example.com:443"),
    ],
)
def test_endpoint_key_is_host_and_effective_port(url: str, key: str) -> None:
    assert wd.endpoint_key(url) == key


def test_a_delivery_repr_never_shows_its_secrets() -> None:
    secret = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTAwMA=="
    delivery = wd.Delivery(
        url="https://hooks.example.com/",
        body=b"{}",
        secrets=[secret],
        webhook_id="msg_1",
        event_type="schedule.triggered",
        attempt=1,
    )
    assert secret not in repr(delivery)
