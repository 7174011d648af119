"""One header rule for saving and sending: what the scheduler API accepts in a target's headers
(servicekit.text, webhookdeliver.is_reserved_header) is exactly what the deliverer sends, so a
header saved is never silently dropped at send time, and one refused is never sent."""

from __future__ import annotations

import pytest

import webhookdeliver as wd
from scheduler.entrypoints.api.schemas import TargetIn
from webhookdeliver.headers import tenant_headers

SAVED_AND_SENT = {"X-Tab": "a\tb", "X-Space": "a b", "X-Visible": "!~", "X-Empty": ""}
REFUSED = {"X-Umlaut": "M\u00fcller", "X-Emoji": "\U0001f600", "X-Nbsp": "a\u00a0b", "X-Cr": "a\rb"}


def test_the_deliverer_sends_exactly_the_values_the_api_accepts() -> None:
    accepted = TargetIn(url="https://example.com/", headers=SAVED_AND_SENT)
    assert tenant_headers(accepted.headers) == SAVED_AND_SENT
    for name, value in REFUSED.items():
        with pytest.raises(ValueError, match=name):
            TargetIn(url="https://example.com/", headers={name: value})
    assert tenant_headers(REFUSED) == {}


@pytest.mark.parametrize("name", ["webhook-x", "Webhook-Anything", "X-Signature", "HOST"])
def test_the_api_refuses_exactly_the_names_the_deliverer_reserves(name: str) -> None:
    assert wd.is_reserved_header(name)
    with pytest.raises(ValueError, match="reserved"):
        TargetIn(url="https://example.com/", headers={name: "v"})
