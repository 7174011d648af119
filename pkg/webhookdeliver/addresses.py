"""The SSRF deny table: which IP addresses a webhook may never be delivered to.

The table is explicit on purpose. `ipaddress`'s `is_private` / `is_global` have changed between
Python releases and misclassify several ranges we must refuse (CGNAT is neither private nor
global, multicast is "global", 6to4 / NAT64 / Teredo embed an IPv4 address they do not look at).
Sources: the IANA IPv4 and IPv6 Special-Purpose Address Registries (every range that is not
globally reachable) plus multicast, reserved and the deprecated site-local range.
"""

from __future__ import annotations

import ipaddress
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# (network, why) — the reason is returned to callers so a refusal says what it hit.
FORBIDDEN_IPV4_NETWORKS: Final[tuple[tuple[ipaddress.IPv4Network, str], ...]] = tuple(
    (ipaddress.IPv4Network(net), why)
    for net, why in (
        ("0.0.0.0/8", "this-network"),
        ("10.0.0.0/8", "private (RFC 1918)"),
        ("100.64.0.0/10", "shared address space / CGNAT (RFC 6598)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local / cloud metadata"),
        ("172.16.0.0/12", "private (RFC 1918)"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation TEST-NET-1"),
        ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
        ("192.168.0.0/16", "private (RFC 1918)"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation TEST-NET-2"),
        ("203.0.113.0/24", "documentation TEST-NET-3"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved / limited broadcast"),
    )
)

FORBIDDEN_IPV6_NETWORKS: Final[tuple[tuple[ipaddress.IPv6Network, str], ...]] = tuple(
    (ipaddress.IPv6Network(net), why)
    for net, why in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        # Both whole ranges: IANA marks IPv4-mapped as not globally reachable, and
        # IPv4-compatible addresses are deprecated (RFC 4291) — a public server never needs them.
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("2001::/23", "IETF protocol assignments (Teredo, benchmarking, ORCHID)"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "SRv6 SIDs"),
        ("fc00::/7", "unique local (ULA)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)

# Public IPv6 unicast lives in 2000::/3; everything outside it is reserved by the IETF, except
# the well-known NAT64 prefix, which is judged by the IPv4 address it embeds.
_GLOBAL_UNICAST_V6: Final = ipaddress.IPv6Network("2000::/3")
_NAT64_WELL_KNOWN: Final = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR: Final = ipaddress.IPv6Network("2002::/16")


def parse_ip(text: str) -> IPAddress | None:
    """Parse a canonical IP address string (no brackets); None when it is not one."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def forbidden_reason(address: str | IPAddress) -> str | None:
    """Why `address` is forbidden as a delivery target, or None when it is allowed.

    An unparseable string or an IPv6 address with a zone id is forbidden (fail closed).
    """
    ip = parse_ip(address) if isinstance(address, str) else address
    if ip is None:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv4Address):
        for net4, why in FORBIDDEN_IPV4_NETWORKS:
            if ip in net4:
                return why
        return None
    if ip.scope_id is not None:
        return "IPv6 zone id"
    for net6, why in FORBIDDEN_IPV6_NETWORKS:
        if ip in net6:
            return why
    if ip in _NAT64_WELL_KNOWN:
        embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        inner = forbidden_reason(embedded)
        return None if inner is None else f"NAT64 embedding {inner}"
    if ip not in _GLOBAL_UNICAST_V6:
        return "reserved IPv6 (outside 2000::/3)"
    if ip in _SIX_TO_FOUR:
        embedded = ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
        inner = forbidden_reason(embedded)
        return None if inner is None else f"6to4 embedding {inner}"
    return None


# Refused even with allow_private_networks (tests and local demos): nothing legitimate lives at a
# cloud metadata endpoint, and it is the first thing an SSRF attempt reaches for.
_METADATA_NETWORKS: Final = (
    ipaddress.IPv4Network("169.254.0.0/16"),  # link-local: AWS/GCP/Azure/OpenStack metadata
    ipaddress.IPv6Network("fe80::/10"),  # IPv6 link-local
    ipaddress.IPv6Network("fd00:ec2::254/128"),  # AWS IMDS over IPv6
)


def metadata_reason(address: str | IPAddress) -> str | None:
    """Why `address` is refused even when private networks are allowed, or None."""
    ip = parse_ip(address) if isinstance(address, str) else address
    if ip is None:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id is not None:
            return "IPv6 zone id"
        embedded = ip.ipv4_mapped or (
            ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64_WELL_KNOWN else None
        )
        if embedded is not None:
            ip = embedded
    for net in _METADATA_NETWORKS:
        if ip.version == net.version and ip in net:
            return "link-local / cloud metadata (refused even with private networks allowed)"
    return None


def guard_reason(address: str | IPAddress, *, allow_private_networks: bool) -> str | None:
    """The guard's verdict for one address under the given mode (None = may connect)."""
    if allow_private_networks:
        return metadata_reason(address)
    return forbidden_reason(address)


def is_forbidden_address(ip: str) -> bool:
    """True when `ip` (a canonical IPv4/IPv6 string) must never be connected to."""
    return forbidden_reason(ip) is not None


def parse_numeric_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """Read `host` the way inet_aton and WHATWG URL parsers do, or None if it is not numeric.

    `127.1`, `2130706433`, `0x7f.1`, `0177.0.0.1` all mean 127.0.0.1 to the system resolver, so
    the guard must see them as the address they are. Raises ValueError for a numeric-looking
    host that does not fit (e.g. `1.2.3.256`, `4294967296`), which URL parsers also refuse.
    """
    labels = host.removesuffix(".").split(".")
    # WHATWG: a host whose last label is a number is an IPv4 address (or an error).
    if not labels or not _is_number_label(labels[-1]):
        return None
    if len(labels) > 4 or not all(_is_number_label(label) for label in labels):
        raise ValueError(f"invalid IPv4 literal {host!r}")
    numbers = [_label_value(label) for label in labels]
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        raise ValueError(f"IPv4 literal out of range {host!r}")
    value = last
    for index, n in enumerate(leading):
        value += n << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _is_number_label(label: str) -> bool:
    if label[:2].lower() == "0x":
        return all(c in "0123456789abcdefABCDEF" for c in label[2:])
    return label.isascii() and label.isdigit()


def _label_value(label: str) -> int:
    if label[:2].lower() == "0x":
        return int(label[2:] or "0", 16)
    if len(label) > 1 and label.startswith("0"):
        if any(c in "89" for c in label):
            raise ValueError(f"invalid octal IPv4 label {label!r}")
        return int(label, 8)
    return int(label)
