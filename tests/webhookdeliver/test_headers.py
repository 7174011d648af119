"""Reserved header names and the tenant-header filter."""

from __future__ import annotations

import pytest

import webhookdeliver as wd
from webhookdeliver.headers import MAX_TENANT_HEADERS, tenant_headers


@pytest.mark.parametrize(
    "name",
    [
        "X-Signature",
        "x-webhook-id",
        "X-TIMESTAMP",
        "X-Event-Type",
        "X-Attempt",
        "User-Agent",
        "Host",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
        "TE",
        "Upgrade",
        "Content-Type",
        "webhook-id",
        "Webhook-Signature",
        "webhook-anything-new",
    ],
)
def test_reserved_names(name):
    assert wd.is_reserved_header(name)


def test_reserved_headers_is_lower_case():
    assert all(name == name.lower() for name in wd.RESERVED_HEADERS)
    assert {"host", "content-length", "x-signature", "webhook-signature"} <= wd.RESERVED_HEADERS


def test_tenant_headers_drop_reserved_and_malformed():
    kept = tenant_headers(
        {
            "X-Tenant": "ok",
            "Authorization": "Bearer t",
            "HOST": "evil",
            "X-Bad": "a\r\nInjected: 1",
            "Bad Name": "v",
            "X-Nul": "a\x00b",
        }
    )
    assert kept == {"X-Tenant": "ok", "Authorization": "Bearer t"}


def test_tenant_headers_are_bounded():
    many = {f"X-H{i}": "v" for i in range(100)}
    assert len(tenant_headers(many)) == MAX_TENANT_HEADERS
    assert tenant_headers({"X-Big": "v" * 10_000}) == {}
