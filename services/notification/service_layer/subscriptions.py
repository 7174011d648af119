"""Subscription use cases: create, update, rotate the secret, delete. Secrets are encrypted at
rest (servicekit SecretBox, bound to the subscription id) and returned only on create/rotate.

Every subscription multiplies each event it matches into a delivery, so a tenant's are bounded:
a create is refused past `max_per_tenant` live subscriptions, disabled ones included
(SubscriptionLimitReached, NOTIFICATION_MAX_SUBSCRIPTIONS_PER_TENANT), and when a live one
already has the same url and the same set of filters (DuplicateSubscription: it would deliver
every event twice to one endpoint; enable or edit the existing one instead). A PATCH is not
refused as a duplicate: it never adds a subscription, so the cap still bounds the fan-out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from notification.domain.subscriptions import normalize_filters
from notification.service_layer.ports import Clock, NotificationStore, SubscriptionRecord
from servicekit.data.ids import new_id
from servicekit.data.secretbox import SecretBox, in_force
from webhookdeliver import generate_secret, validate_target_url


class SubscriptionNotFound(LookupError):
    """No live subscription with that id for that tenant (another tenant's looks the same)."""


@dataclass(frozen=True)
class SubscriptionWithSecret:
    subscription: SubscriptionRecord
    secret: str


def _aad(sub_id: str) -> bytes:
    return sub_id.encode()


DEFAULT_MAX_SUBSCRIPTIONS_PER_TENANT = 100
"""Live subscriptions per tenant: each one is a delivery per matching event."""

PLAINTEXT_CACHE_SIZE = 4096
"""Decrypted signing secrets kept by the dispatcher's process (one per ciphertext and
subscription), so that a claim does not decrypt each endpoint's secret again. A rotated-out or
deleted subscription's secret stays until the cache fills and is emptied (never served: the
key is the ciphertext)."""


class SubscriptionService:
    def __init__(
        self,
        store: NotificationStore,
        box: SecretBox,
        clock: Clock,
        *,
        allow_private_networks: bool,
        secret_grace_seconds: int,
        known_event_types: Sequence[str],
        allowed_ports: frozenset[int] | None = None,
        max_per_tenant: int = DEFAULT_MAX_SUBSCRIPTIONS_PER_TENANT,
    ) -> None:
        self.store = store
        self.max_per_tenant = max_per_tenant
        self.box = box
        self.clock = clock
        self.allow_private_networks = allow_private_networks
        self.allowed_ports = allowed_ports
        self.grace = timedelta(seconds=secret_grace_seconds)
        self.known_event_types = tuple(known_event_types)
        self._plaintexts: dict[tuple[str, str], str] = {}

    def _check_url(self, url: str) -> None:
        # Raises webhookdeliver.InvalidTargetURL; the API maps it to a 422 naming `url`.
        validate_target_url(
            url,
            allow_private_networks=self.allow_private_networks,
            allowed_ports=self.allowed_ports,
        )

    async def create(
        self,
        tenant_id: str,
        url: str,
        event_types: Sequence[str],
        description: str | None,
        enabled: bool,
    ) -> SubscriptionWithSecret:
        self._check_url(url)
        filters = normalize_filters(event_types, known=self.known_event_types)
        now = self.clock()
        sub_id = new_id("sub", at=now)
        secret = generate_secret()
        sub = SubscriptionRecord(
            id=sub_id,
            tenant_id=tenant_id,
            url=url,
            event_types=filters,
            description=description,
            enabled=enabled,
            disabled_reason=None if enabled else "disabled_by_tenant",
            secret_enc=self.box.encrypt(secret, _aad(sub_id)),
            previous_secret_enc=None,
            previous_secret_expires_at=None,
            failing_since=None,
            consecutive_failures=0,
            created_at=now,
            updated_at=now,
        )
        # Raises SubscriptionLimitReached or DuplicateSubscription (ports), mapped by the API.
        await self.store.insert_subscription(sub, max_per_tenant=self.max_per_tenant)
        return SubscriptionWithSecret(sub, secret)

    async def update(
        self, tenant_id: str, sub_id: str, changes: dict[str, Any]
    ) -> SubscriptionRecord:
        values: dict[str, Any] = {}
        if "url" in changes:
            self._check_url(changes["url"])
            values["url"] = changes["url"]
        if "event_types" in changes:
            values["event_types"] = normalize_filters(
                changes["event_types"], known=self.known_event_types
            )
        if "description" in changes:
            values["description"] = changes["description"]
        if "enabled" in changes:
            enabled = bool(changes["enabled"])
            values["enabled"] = enabled
            values["disabled_reason"] = None if enabled else "disabled_by_tenant"
            if enabled:
                # Re-enabling starts a new health streak: the old failures were judged already.
                values.update(failing_since=None, consecutive_failures=0)
        values["updated_at"] = self.clock()
        updated = await self.store.update_subscription(tenant_id, sub_id, values)
        if updated is None:
            raise SubscriptionNotFound(sub_id)
        return updated

    async def rotate_secret(self, tenant_id: str, sub_id: str) -> SubscriptionWithSecret:
        current = await self.store.get_subscription(tenant_id, sub_id)
        if current is None:
            raise SubscriptionNotFound(sub_id)
        now = self.clock()
        secret = generate_secret()
        updated = await self.store.update_subscription(
            tenant_id,
            sub_id,
            {
                "secret_enc": self.box.encrypt(secret, _aad(sub_id)),
                # The old secret keeps signing (second X-Signature entry) during the grace period.
                "previous_secret_enc": current.secret_enc,
                "previous_secret_expires_at": now + self.grace,
                "updated_at": now,
            },
        )
        if updated is None:
            raise SubscriptionNotFound(sub_id)
        return SubscriptionWithSecret(updated, secret)

    async def delete(self, tenant_id: str, sub_id: str) -> None:
        if not await self.store.delete_subscription(tenant_id, sub_id, self.clock()):
            raise SubscriptionNotFound(sub_id)

    def signing_secrets(self, sub: SubscriptionRecord, now: datetime) -> list[str]:
        """Newest first; the previous secret only while its grace period lasts."""
        stored = in_force(
            sub.secret_enc, sub.previous_secret_enc, sub.previous_secret_expires_at, now
        )
        return [self._decrypt(s, sub.id) for s in stored]

    def _decrypt(self, ciphertext: str, sub_id: str) -> str:
        # A ciphertext never changes its plaintext (rotation writes a new one): caching it is
        # safe, and bounded (emptied when full: a rare re-decryption, no bookkeeping per hit).
        key = (ciphertext, sub_id)
        plain = self._plaintexts.get(key)
        if plain is None:
            plain = self.box.decrypt(ciphertext, _aad(sub_id))
            if len(self._plaintexts) >= PLAINTEXT_CACHE_SIZE:
                self._plaintexts.clear()
            self._plaintexts[key] = plain
        return plain
