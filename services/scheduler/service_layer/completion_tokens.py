"""A callback-mode attempt's completion token (DESIGN.md §7b): drawn before the delivery that
carries it, its SHA-256 stored on the run under the attempt's lease, so a completion call that
races the settle is recognised (and answered "too early", not "unauthorized")."""

from __future__ import annotations

import secrets

from scheduler.domain.completion import TOKEN_PREFIX, token_digest
from scheduler.domain.run import Run
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory


def new_completion_token() -> str:
    """A fresh bearer token for one attempt (256 random bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


async def issue_completion_token(uows: UnitOfWorkFactory, run: Run, owner: str) -> str | None:
    """Before a callback-mode attempt: a token for it, its digest stored on the run (so a call
    that races the settle is recognised). None: the lease is lost, do not deliver."""
    token = new_completion_token()
    run.issue_completion_token(owner, token_digest(token))
    async with uows() as uow:
        stored = await uow.runs.store_completion_token(run, owner)
        await uow.commit()
    return token if stored else None
