"""A real SMTP server on 127.0.0.1 (aiosmtpd) recording what it receives, and driving the email
sender step by step."""

from __future__ import annotations

import asyncio
import email
import email.policy
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope, Session

from notification.service_layer.email_sender import EmailSender
from tests.support.processes import free_port


class Inbox:
    """An aiosmtpd handler. `replies` and `delays` are consumed message by message (then
    "250 OK" at once); a delay holds the DATA answer, as a slow relay does. The handler runs on
    the controller's own thread and loop, so `arrived` is a threading.Event."""

    def __init__(self) -> None:
        self.messages: list[tuple[Envelope, EmailMessage]] = []
        self.replies: list[str] = []
        self.delays: list[float] = []
        self.arrived = threading.Event()
        self._lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Session, envelope: Envelope) -> str:
        with self._lock:
            delay = self.delays.pop(0) if self.delays else 0.0
            reply = self.replies.pop(0) if self.replies else "250 OK"
        self.arrived.set()
        if delay:
            await asyncio.sleep(delay)
        if reply.startswith("250"):
            parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)  # type: ignore[arg-type]
            with self._lock:
                self.messages.append((envelope, parsed))
        return reply

    def message_ids(self) -> list[str]:
        return [str(m["Message-ID"]) for _, m in self.messages]


@pytest.fixture
def smtp_server() -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    yield inbox, controller.port
    controller.stop()


async def send_due(sender: EmailSender) -> int:
    """One claim, its sends, their completions written. Returns how many were claimed."""
    claimed, _ = await sender.pipeline.pump()
    await sender.pipeline.drain()
    return claimed


async def wait_arrived(inbox: Inbox, timeout: float = 10.0) -> None:
    if not await asyncio.to_thread(inbox.arrived.wait, timeout):
        raise AssertionError("no SMTP transaction reached the server")
