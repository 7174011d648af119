"""Security headers on the API answers, on the console's origin (the gateway) and on each
service's own port, as the console's pages carry them: nosniff, a frame policy, no referrer, and
a CSP that lets a JSON answer load nothing. The docs pages keep only the frame policy in their
CSP, and still render in a real browser (Swagger UI needs its inline start-up script)."""

from __future__ import annotations

import httpx
from playwright.async_api import Page

from servicekit.http.security_headers import (
    API_CONTENT_SECURITY_POLICY,
    DOCS_CONTENT_SECURITY_POLICY,
)
from tests.console.conftest import Console


def assert_guarded(r: httpx.Response, csp: str = API_CONTENT_SECURITY_POLICY) -> None:
    where = f"{r.request.method} {r.request.url} -> {r.status_code}"
    assert r.headers.get("x-content-type-options") == "nosniff", where
    assert r.headers.get("x-frame-options") == "DENY", where
    assert r.headers.get("referrer-policy") == "no-referrer", where
    assert r.headers.get("content-security-policy") == csp, where


async def test_v1_answers_carry_security_headers_on_the_gateway_and_own_ports(
    console: Console,
) -> None:
    bearer = {"Authorization": f"Bearer {console.token}"}
    targets = [
        (console.origin, "/v1/schedules/"),
        (console.origin, "/v1/subscriptions/"),
        (console.scheduler_url, "/v1/schedules/"),
        (console.notification_url, "/v1/subscriptions/"),
    ]
    async with httpx.AsyncClient(timeout=30) as client:
        for base, path in targets:
            ok = await client.get(base + path, headers=bearer)
            assert ok.status_code == 200, ok.text
            assert_guarded(ok)
            refused = await client.get(base + path)  # an error answer is guarded alike
            assert refused.status_code == 401
            assert_guarded(refused)
            assert_guarded(await client.get(base + "/v1/schedules/sch_missing", headers=bearer))
        spec = await client.get(console.scheduler_url + "/openapi.json")
        assert_guarded(spec)
        for base in (console.scheduler_url, console.notification_url):
            for docs in ("/docs", "/redoc"):
                page = await client.get(base + docs)
                assert page.status_code == 200
                assert_guarded(page, DOCS_CONTENT_SECURITY_POLICY)


async def test_the_docs_pages_still_render_under_their_headers(
    console: Console, page: Page
) -> None:
    """Swagger UI builds the operation list from /openapi.json with its packaged scripts; the
    `page` fixture fails the test on any page error or CSP refusal."""
    await page.goto(console.scheduler_url + "/docs")
    await page.locator(".opblock").first.wait_for()
    assert await page.locator(".opblock").count() > 3
    await page.goto(console.notification_url + "/redoc")
    await page.get_by_text("subscriptions", exact=False).first.wait_for()
