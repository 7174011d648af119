"""Mail transports: SMTP via aiosmtplib, or `.eml` files under var/mail when no SMTP is set."""

from __future__ import annotations

import os
import ssl
from email.message import EmailMessage
from pathlib import Path
from urllib.parse import unquote, urlsplit

import aiosmtplib


class InvalidSmtpURL(ValueError):
    """NOTIFICATION_SMTP_URL is not smtp://[user:pass@]host[:port] or smtps://…"""


class SmtpMailer:
    """`smtp://` upgrades with STARTTLS when the server offers it; `smtps://` is implicit TLS.

    Certificates are verified against the system store unless `ssl_context` says otherwise.
    """

    def __init__(
        self, url: str, *, timeout_seconds: float = 30.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise InvalidSmtpURL("NOTIFICATION_SMTP_URL must be smtp://host[:port] or smtps://…")
        self.implicit_tls = parts.scheme == "smtps"
        self.host = parts.hostname
        self.port = parts.port or (465 if self.implicit_tls else 587)
        self.username = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        self.timeout = timeout_seconds
        self.ssl_context = ssl_context

    @property
    def server(self) -> str:
        return f"{self.host.lower()}:{self.port}"

    async def send(self, message: EmailMessage) -> None:
        await aiosmtplib.send(
            message,
            hostname=self.host,
            port=self.port,
            username=self.username,
            password=self.password,
            use_tls=self.implicit_tls,
            # None = STARTTLS when the server advertises it (aiosmtplib's opportunistic mode).
            start_tls=False if self.implicit_tls else None,
            tls_context=self.ssl_context,
            timeout=self.timeout,
        )


class EmlDirMailer:
    """Writes each message as `<Message-ID>.eml` (the embedded default's "outbox")."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @property
    def server(self) -> str:
        return f"file:{self.directory}"

    async def send(self, message: EmailMessage) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        ident = str(message.get("Message-ID", "")).strip("<>") or os.urandom(8).hex()
        safe = "".join(ch if ch.isalnum() or ch in "-_.@" else "_" for ch in ident)[:150]
        path = self.directory / f"{safe}.eml"
        tmp = path.with_suffix(".eml.tmp")
        tmp.write_bytes(bytes(message))
        os.replace(tmp, path)  # readers never see half a file
