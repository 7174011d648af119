"""The one NetworkPolicy of the pods that call tenant endpoints (ADR 0040) and the SSRF guard in
pkg/webhookdeliver/addresses.py are two guards over the same decision; these tests make them
agree: the IPv4 excepts are exactly the guard's deny table, nothing the guard refuses is allowed
by the policy (IPv6 included), and the policy opens only 80/443 to the internet, DNS to the
cluster resolver, PostgreSQL and Kafka by selector, and ingress from the gateway and Prometheus.
notification's mail relay has a policy of its own (notification-smtp): one address, mail ports."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.deploy.rendered import (
    OVERLAYS,
    RUNBOOK,
    Doc,
    env_from_config_maps,
    named,
    of_kind,
    render,
)
from webhookdeliver import DEFAULT_ALLOWED_PORTS, parse_allowed_ports
from webhookdeliver.addresses import (
    FORBIDDEN_IPV4_NETWORKS,
    FORBIDDEN_IPV6_NETWORKS,
    forbidden_reason,
)

WEBHOOK_POD_LABEL = ("scheduler-platform/egress", "webhooks")
# The one policy besides a workload's own: notification's SMTP relay, set by the operator.
SMTP_POLICY = "notification-smtp"
SMTP_PORTS = {("TCP", 587), ("TCP", 465)}
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _selects(policy: Doc, labels: dict[str, str]) -> bool:
    selector: dict[str, str] = policy["spec"]["podSelector"].get("matchLabels", {})
    return selector.items() <= labels.items()


def _ip_blocks(policy: Doc) -> Iterator[tuple[Doc, Doc]]:
    """(rule, ipBlock) of every egress peer that is an ipBlock."""
    for rule in policy["spec"].get("egress", []):
        for peer in rule.get("to", []):
            if "ipBlock" in peer:
                yield rule, peer["ipBlock"]


def _allows(policy: Doc, address: str) -> bool:
    """Whether some ipBlock of the policy admits `address` (on any port)."""
    ip = ipaddress.ip_address(address)
    for _, block in _ip_blocks(policy):
        cidr = ipaddress.ip_network(block["cidr"])
        if ip.version != cidr.version or ip not in cidr:
            continue
        if not any(ip in ipaddress.ip_network(e) for e in block.get("except", [])):
            return True
    return False


def _edges(net: Network) -> list[str]:
    """The first and last address of a network and their outside neighbours."""
    first, last = int(net.network_address), int(net.broadcast_address)
    top = 2**net.max_prefixlen - 1
    cls = ipaddress.IPv4Address if net.version == 4 else ipaddress.IPv6Address
    return [str(cls(n)) for n in (first - 1, first, last, last + 1) if 0 <= n <= top]


PUBLIC = ["1.1.1.1", "8.8.8.8", "93.184.215.14", "2606:4700:4700::1111", "2a00:1450:4001::200e"]
SAMPLES = (
    PUBLIC
    + [
        a
        for nets in (FORBIDDEN_IPV4_NETWORKS, FORBIDDEN_IPV6_NETWORKS)
        for n, _ in nets
        for a in _edges(n)
    ]
    + ["::ffff:10.0.0.1", "64:ff9b::a00:1", "fd00:ec2::254", "fe80::1", "::1", "100.100.100.200"]
)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_policy_selects_both_webhook_delivering_workloads(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    policies = of_kind(docs, "NetworkPolicy")
    # default-deny selects every pod and opens nothing; besides it, exactly one policy each.
    deny = named(docs, "NetworkPolicy", "default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    chosen = {}
    for name in ("scheduler-worker", "notification", "scheduler-api"):
        labels = named(docs, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        selecting = [
            p["metadata"]["name"]
            for p in policies
            if p is not deny and p["metadata"]["name"] != SMTP_POLICY and _selects(p, labels)
        ]
        assert len(selecting) == 1, (name, selecting)
        chosen[name] = selecting[0]
        assert (WEBHOOK_POD_LABEL in labels.items()) == (name != "scheduler-api")
    assert chosen["scheduler-worker"] == chosen["notification"] == "webhook-egress"
    assert chosen["scheduler-api"] != "webhook-egress"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ipv4_excepts_are_exactly_the_guards_deny_table(overlay: str) -> None:
    for policy in of_kind(render(f"overlays/{overlay}"), "NetworkPolicy"):
        if policy["metadata"]["name"] == SMTP_POLICY:
            continue  # the operator's relay, one address (test_smtp_relay_...)
        for _, block in _ip_blocks(policy):
            if ipaddress.ip_network(block["cidr"]).version != 4:
                continue
            assert block["cidr"] == "0.0.0.0/0"
            excepts = {ipaddress.ip_network(e) for e in block["except"]}
            assert excepts == {n for n, _ in FORBIDDEN_IPV4_NETWORKS}, policy["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ipv6_admits_nothing_the_guard_refuses(overlay: str) -> None:
    for policy in of_kind(render(f"overlays/{overlay}"), "NetworkPolicy"):
        if policy["metadata"]["name"] == SMTP_POLICY:
            continue
        for _, block in _ip_blocks(policy):
            cidr = ipaddress.ip_network(block["cidr"])
            if cidr.version != 6:
                continue
            excepts = [ipaddress.IPv6Network(e) for e in block["except"]]
            for net, why in FORBIDDEN_IPV6_NETWORKS:
                inside = net.overlaps(cidr)
                assert not inside or any(net.subnet_of(e) for e in excepts), (net, why)
            # Each except is something the guard refuses (at least in part: 6to4 is refused
            # whole here, the guard judges the IPv4 address it embeds).
            for e in excepts:
                assert forbidden_reason(e.network_address) is not None or str(e) == "2002::/16"


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("address", SAMPLES)
def test_policy_and_guard_agree_on_each_address(overlay: str, address: str) -> None:
    policy = named(render(f"overlays/{overlay}"), "NetworkPolicy", "webhook-egress")
    guard_allows = forbidden_reason(address) is None
    policy_allows = _allows(policy, address)
    if ipaddress.ip_address(address).version == 4:
        assert policy_allows == guard_allows, address
    else:
        # IPv6: the policy may be stricter (NAT64, 6to4 are refused whole), never looser.
        assert guard_allows or not policy_allows, address
    if address in PUBLIC:
        assert policy_allows, f"{address} is a public endpoint a tenant may use"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_egress_is_web_ports_dns_database_and_kafka_only(overlay: str) -> None:
    policy = named(render(f"overlays/{overlay}"), "NetworkPolicy", "webhook-egress")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    seen = set()
    for rule in policy["spec"]["egress"]:
        ports = {(p["protocol"], p["port"]) for p in rule["ports"]}
        peers = rule["to"]
        if all("ipBlock" in p for p in peers):
            assert ports == {("TCP", 80), ("TCP", 443)}
            seen.add("internet")
            continue
        # Every other peer is a namespace AND pod selector (never a bare namespace or address).
        for peer in peers:
            assert set(peer) == {"namespaceSelector", "podSelector"}, peer
            assert peer["podSelector"]["matchLabels"]
        (peer,) = peers
        namespace = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        if ports == {("UDP", 53), ("TCP", 53)}:
            assert namespace == "kube-system"
            assert peer["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
            seen.add("dns")
        elif ports == {("TCP", 5432)}:
            seen.add("postgres")
        elif ports == {("TCP", 9092)}:
            seen.add("kafka")
        else:
            raise AssertionError(f"unexpected egress rule {rule}")
    assert seen == {"internet", "dns", "postgres", "kafka"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ingress_only_from_the_gateway_and_the_scraper(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    policy = named(docs, "NetworkPolicy", "webhook-egress")
    served = set()
    for name in ("scheduler-worker", "notification"):
        c = named(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        served |= {p["containerPort"] for p in c["ports"]}
    sources = set()
    for rule in policy["spec"]["ingress"]:
        assert {p["port"] for p in rule["ports"]} <= served
        for peer in rule["from"]:
            assert "ipBlock" not in peer
            namespace = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            if namespace == "monitoring":
                assert peer["podSelector"]["matchLabels"] == {
                    "app.kubernetes.io/name": "prometheus"
                }
                # Prometheus scrapes every port the pods serve.
                assert {p["port"] for p in rule["ports"]} == served
            sources.add(namespace)
    assert sources == {"gateway", "monitoring"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_smtp_relay_is_one_address_on_mail_ports_for_the_notification_server_only(
    overlay: str,
) -> None:
    docs = render(f"overlays/{overlay}")
    policy = named(docs, "NetworkPolicy", SMTP_POLICY)
    # Egress only: it opens nothing inward, and no tenant-facing rule gains mail ports.
    assert policy["spec"]["policyTypes"] == ["Egress"]
    assert "ingress" not in policy["spec"]
    selected = [
        d["metadata"]["name"]
        for d in (
            *of_kind(docs, "Deployment"),
            *of_kind(render(f"overlays/{overlay}/migrate"), "Job"),
        )
        if _selects(policy, d["spec"]["template"]["metadata"]["labels"])
    ]
    assert selected == ["notification"]
    (rule,) = policy["spec"]["egress"]
    assert {(p["protocol"], p["port"]) for p in rule["ports"]} == SMTP_PORTS
    for peer in rule["to"]:
        if "ipBlock" in peer:
            net = ipaddress.ip_network(peer["ipBlock"]["cidr"])
            assert net.num_addresses == 1, f"the relay's address, never a range: {net}"
        else:
            assert set(peer) == {"namespaceSelector", "podSelector"}, peer
            assert peer["podSelector"]["matchLabels"]


def test_the_runbooks_smtp_port_is_open_and_webhook_egress_keeps_web_ports() -> None:
    """The relay port the runbook configures (NOTIFICATION_SMTP_URL) is one the policy opens;
    webhook-egress is not widened for it."""
    urls = re.findall(r"NOTIFICATION_SMTP_URL=\"(smtps?://[^\"]+)\"", RUNBOOK.read_text())
    assert urls, "the runbook shows NOTIFICATION_SMTP_URL"
    docs = render("overlays/production")
    (rule,) = named(docs, "NetworkPolicy", SMTP_POLICY)["spec"]["egress"]
    for url in urls:
        port = urlsplit(url).port or (465 if url.startswith("smtps:") else 587)
        assert ("TCP", port) in {(p["protocol"], p["port"]) for p in rule["ports"]}, url
    for r in named(docs, "NetworkPolicy", "webhook-egress")["spec"]["egress"]:
        assert not {p["port"] for p in r["ports"]} & {port for _, port in SMTP_PORTS}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_guards_port_allow_list_is_what_the_policy_opens(overlay: str) -> None:
    """A target port the guard accepts but the policy drops would hang every attempt to its
    connect timeout: the deliverers' allow-list is exactly the internet rule's ports."""
    docs = render(f"overlays/{overlay}")
    policy = named(docs, "NetworkPolicy", "webhook-egress")
    (internet,) = [r for r in policy["spec"]["egress"] if all("ipBlock" in p for p in r["to"])]
    opened = {p["port"] for p in internet["ports"]}
    for name in ("scheduler-worker", "notification"):
        container = named(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        env = env_from_config_maps(docs, container)
        assert env.get("WEBHOOK_ALLOW_PRIVATE_NETWORKS") == "false", name
        configured = env.get("WEBHOOK_ALLOWED_PORTS")
        allowed = DEFAULT_ALLOWED_PORTS if configured is None else parse_allowed_ports(configured)
        assert allowed == opened, (name, sorted(allowed), sorted(opened))
