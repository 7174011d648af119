"""Sign-in in Chromium: a refused token (malformed, signed with another key, expired) says why on
the sign-in page and leaves the tab signed out (no stored token, no "Sign out"); a good one then
signs in. The reason is the API's own 401 problem detail (authclient), never the token."""

from __future__ import annotations

import time

import pytest
from playwright.async_api import Page, expect

from authclient import mint_token
from tests.console.conftest import Console, shoot

SCOPES = ["schedules:read", "schedules:write", "notifications:read", "notifications:write"]


def _dev_key(console: Console) -> str:
    return (console.workdir / "var" / "auth_hs256_key").read_text().strip()


async def _signed_out_saying(page: Page, console: Console, reason: str) -> None:
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await expect(page.get_by_role("alert")).to_contain_text(reason)
    await expect(page.get_by_role("button", name="Sign out")).to_be_hidden()
    assert await page.evaluate("sessionStorage.getItem('console.token')") is None
    assert console.token not in (await page.get_by_role("alert").text_content() or "")


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("malformed", "token is malformed"),
        ("other-key", "token signature is invalid"),
        ("expired", "token has expired"),
    ],
)
async def test_a_refused_token_says_why_and_stays_signed_out(
    console: Console, page: Page, kind: str, reason: str
) -> None:
    if kind == "malformed":
        token = "not-a-jwt"
    elif kind == "other-key":
        token = mint_token("k" * 64, tenant_id="dev-tenant", scopes=SCOPES)
    else:  # valid an hour, two hours ago
        key = _dev_key(console)
        token = mint_token(
            key, tenant_id="dev-tenant", scopes=SCOPES, ttl_seconds=3600, now=time.time() - 7200
        )
    # Typed into the form: the console asks the API before leaving the page.
    await page.goto(console.origin + "/#/sign-in")
    await page.get_by_label("Bearer token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await _signed_out_saying(page, console, reason)
    assert token not in (await page.get_by_role("alert").text_content() or "")

    # A good token then signs in, and the refusal is gone.
    await page.get_by_label("Bearer token").fill(console.token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Schedules")).to_be_visible()
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    await expect(page.get_by_text(reason)).to_have_count(0)


async def test_an_expired_sign_in_link_says_so(console: Console, page: Page) -> None:
    """An old banner link (`#token=...`, valid 12 h) lands on the sign-in page, not a blank
    form under a "Sign out" button."""
    expired = mint_token(
        _dev_key(console), tenant_id="dev-tenant", scopes=SCOPES, now=time.time() - 7200
    )
    await page.goto(f"{console.origin}/#token={expired}")
    await _signed_out_saying(page, console, "token has expired")
    await shoot(page, "sign-in-refused")
    assert "token" not in page.url.split("#", 1)[-1].replace("sign-in", "")
