"""Creation-time checks of a webhook target URL: syntax, scheme and literal addresses, no DNS.

The APIs call `validate_target_url` when a tenant saves a URL; the `Deliverer` calls it again
before every attempt (the rules may have tightened since) and then resolves and vets the host.
We parse with `yarl`, the parser aiohttp itself uses, so the checked host is the connected host.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from yarl import URL

from webhookdeliver.addresses import IPAddress, guard_reason, parse_numeric_ipv4

MAX_URL_LENGTH: Final = 2048  # bytes of URL text; longer URLs are abuse, not webhooks
MAX_HOST_LENGTH: Final = 253  # RFC 1035 limit on a presentation-form domain name

# Names that reach internal services whatever DNS says. `localhost` and `.localhost` per
# RFC 6761; `.internal` is ICANN's private-use TLD (2024) used by GCE metadata; `.local` is mDNS;
# `.home.arpa` is RFC 8375 home networks.
FORBIDDEN_HOST_NAMES: Final = frozenset(
    {
        "localhost",
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.com",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)
FORBIDDEN_HOST_SUFFIXES: Final = (".localhost", ".internal", ".local", ".home.arpa")

_HOST_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._")
_UNSAFE_URL_CHARS: Final = re.compile(r"[\s\\\x00-\x1f\x7f]")
# Ports a target may name, unless configured otherwise, while private networks are refused: the
# ones the egress NetworkPolicy opens (deploy/kubernetes/base/network-policies.yaml), so a URL the
# guard accepts is one the cluster lets through. With private networks allowed (dev, tests with
# loopback receivers on random ports) any port is.
DEFAULT_ALLOWED_PORTS: Final = frozenset({80, 443})
# A port is 1-5 ASCII digits. yarl (like int()) also reads "+80", "8_0", Arabic-Indic or
# fullwidth digits as 80, which other parsers refuse or read differently.
_PORT_TEXT: Final = re.compile(r"[0-9]{1,5}")


class InvalidTargetURL(ValueError):
    """The URL cannot be a webhook target (bad scheme, syntax, userinfo...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ForbiddenTargetURL(InvalidTargetURL):
    """The URL names a forbidden address or host: an SSRF refusal (`ssrf_blocked`)."""


@dataclass(frozen=True, slots=True)
class CheckedTarget:
    """A URL that passed the static checks; `ip` is set when the host is an IP literal."""

    url: URL
    host: str  # IDNA-encoded, lower case, no trailing dot, no brackets
    port: int
    ip: IPAddress | None


@functools.lru_cache(maxsize=4096)
def endpoint_key(url: str) -> str:
    """`host:port` of a target URL (the scheme's default port when none is written): the unit
    of per-endpoint concurrency both services' dispatchers share. Remembered (a pure function
    of the URL, asked for every run a dispatcher claims)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port or (443 if parts.scheme == 'https' else 80)}"


def parse_allowed_ports(text: str) -> frozenset[int]:
    """A port allow-list setting (`WEBHOOK_ALLOWED_PORTS`): comma-separated ports 1..65535.
    Raises ValueError naming what is wrong."""
    ports = set()
    for item in text.split(","):
        item = item.strip()
        if not _PORT_TEXT.fullmatch(item) or not 1 <= int(item) <= 65535:
            raise ValueError(f"not a port 1..65535: {item!r}")
        ports.add(int(item))
    return frozenset(ports)


def allowed_ports_setting(value: object) -> object:
    """The settings classes' validator of WEBHOOK_ALLOWED_PORTS: text is parsed
    (`parse_allowed_ports`), blank text is unset (None); other values pass through."""
    if isinstance(value, str):
        return parse_allowed_ports(value) if value.strip() else None
    return value


def validate_target_url(
    url: str, *, allow_private_networks: bool, allowed_ports: frozenset[int] | None = None
) -> None:
    """Raise `InvalidTargetURL` (or its subclass `ForbiddenTargetURL`) unless `url` may be saved.

    Refused: schemes other than http/https, missing host, userinfo, fragments-only tricks such as
    backslashes, whitespace or control characters, ports that are not 1-5 ASCII digits or are
    outside 1..65535, IPv6 zone ids, numeric IPv4 spellings that are not dotted quads, and —
    unless `allow_private_networks` — literal forbidden addresses in any spelling, `localhost`,
    `*.localhost`, metadata names, private-use suffixes and single-label names; and ports
    outside `allowed_ports` (None: `DEFAULT_ALLOWED_PORTS`, or any port with
    `allow_private_networks`). Performs no DNS lookup.
    """
    check_target_url(
        url, allow_private_networks=allow_private_networks, allowed_ports=allowed_ports
    )


def check_target_url(
    url: str, *, allow_private_networks: bool, allowed_ports: frozenset[int] | None = None
) -> CheckedTarget:
    """`validate_target_url` that also returns what it parsed (used by the `Deliverer`)."""
    target = _checked_host(url, allow_private_networks)
    ports = DEFAULT_ALLOWED_PORTS if allowed_ports is None else allowed_ports
    if (allowed_ports is not None or not allow_private_networks) and target.port not in ports:
        listed = ", ".join(str(p) for p in sorted(ports))
        raise ForbiddenTargetURL(f"port {target.port} is not allowed (allowed: {listed})")
    return target


def _checked_host(url: str, allow_private_networks: bool) -> CheckedTarget:
    """Everything but the port allow-list: syntax, scheme, host and literal addresses."""
    if not isinstance(url, str):
        raise InvalidTargetURL("URL must be a string")
    if len(url.encode("utf-8", "surrogatepass")) > MAX_URL_LENGTH:
        raise InvalidTargetURL(f"URL longer than {MAX_URL_LENGTH} bytes")
    # WHATWG parsers read "\" as "/" and strip tabs/newlines while yarl does not: refuse them so
    # no two parsers can disagree on the host.
    if _UNSAFE_URL_CHARS.search(url):
        raise InvalidTargetURL("URL contains whitespace, control characters or backslashes")
    try:
        parsed = URL(url)
        port = parsed.port
        port_text = _port_text(url)
    except ValueError as exc:
        raise InvalidTargetURL(f"unparseable URL: {exc}") from None
    if port_text is not None and not _PORT_TEXT.fullmatch(port_text):
        raise InvalidTargetURL("port must be 1 to 5 ASCII digits")
    if parsed.scheme not in ("http", "https"):
        raise InvalidTargetURL("scheme must be http or https")
    if parsed.user is not None or parsed.password is not None or "@" in (parsed.raw_authority):
        raise InvalidTargetURL("credentials (userinfo) in the URL are not allowed")
    raw_host = parsed.raw_host
    if not raw_host:
        raise InvalidTargetURL("URL has no host")
    if port is None or not 1 <= port <= 65535:
        raise InvalidTargetURL("port must be 1..65535")
    if "%" in raw_host:
        raise ForbiddenTargetURL("IPv6 zone ids and percent-encoded hosts are not allowed")
    host = raw_host.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > MAX_HOST_LENGTH:
        raise InvalidTargetURL("host is empty or too long")

    if ":" in host:  # yarl only yields a colon for a bracketed IPv6 literal
        try:
            ip6: IPAddress = ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidTargetURL("invalid IPv6 literal") from None
        _check_literal(ip6, allow_private_networks)
        return CheckedTarget(parsed, str(ip6), port, ip6)

    try:
        ip4 = parse_numeric_ipv4(host)
    except ValueError as exc:
        raise InvalidTargetURL(str(exc)) from None
    if ip4 is not None:
        _check_literal(ip4, allow_private_networks)
        if host != str(ip4):
            # Allowed or not, a non-canonical spelling is refused: aiohttp refuses it too, and
            # the system resolver would read it differently from a human reviewer.
            raise InvalidTargetURL(f"non-canonical IPv4 literal (means {ip4})")
        return CheckedTarget(parsed, host, port, ip4)

    if not set(host) <= _HOST_NAME_CHARS or any(not label for label in host.split(".")):
        raise InvalidTargetURL("host is not a valid domain name")
    if _is_metadata_name(host):
        raise ForbiddenTargetURL(f"host {host!r} is a cloud metadata service")
    if not allow_private_networks:
        if host in FORBIDDEN_HOST_NAMES or host.endswith(FORBIDDEN_HOST_SUFFIXES):
            raise ForbiddenTargetURL(f"host {host!r} is reserved for local or metadata services")
        if "." not in host:
            # Single labels resolve through search domains to internal names.
            raise ForbiddenTargetURL("host must be a fully qualified domain name")
    return CheckedTarget(parsed, host, port, None)


def _port_text(url: str) -> str | None:
    """The port exactly as written (None without a colon after the host); yarl's own view of
    the authority is already normalised."""
    host_port = urlsplit(url).netloc.rpartition("@")[2]
    if host_port.startswith("["):
        host_port = host_port[host_port.find("]") + 1 :]
    if ":" not in host_port:
        return None
    return host_port.partition(":")[2]


def _is_metadata_name(host: str) -> bool:
    """Cloud metadata names are refused in every mode, like their link-local addresses."""
    return host in FORBIDDEN_HOST_NAMES and host.startswith("metadata")


def _check_literal(ip: IPAddress, allow_private_networks: bool) -> None:
    why = guard_reason(ip, allow_private_networks=allow_private_networks)
    if why is not None:
        raise ForbiddenTargetURL(f"address {ip} is forbidden ({why})")
