"""The authenticated caller: who it is, which tenant it acts for, and what it may do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """A verified token's subject, tenant and scopes. Every query is scoped to `tenant_id`."""

    subject: str
    tenant_id: str
    scopes: frozenset[str]

    def has(self, scope: str) -> bool:
        """True when the token granted `scope` exactly (no wildcards, no hierarchy)."""
        return scope in self.scopes
