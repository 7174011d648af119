"""uvicorn's h11 protocol with the read deadlines and the connection cap uvicorn lacks.

uvicorn bounds only the idle time between requests (`timeout_keep_alive`), and resets even that on
every byte, so a client that trickles a request line, headers or a declared body holds its
connection (and a file descriptor) for as long as it likes. ASGI middleware cannot help: it runs
once the headers are parsed. Per connection, this protocol adds:

- a header deadline: the request line and headers must be complete within `header_timeout_seconds`
  of the connection opening or of the first byte of the next keep-alive request;
- a body deadline: a declared or chunked body must be complete within `body_timeout_seconds` of
  its headers (also after an early answer such as 401 or 413, which keeps reading it);
- a cap: past `max_connections` open connections a new one gets `503` and is closed at once, so
  descriptors stay bounded instead of running out.

A deadline answers `408` when no response has started and closes the connection; an app still
waiting for the body receives `http.disconnect`. Each refusal is logged rate-limited (servicekit
logging). The bound is absolute, not per read: trickling cannot extend it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from servicekit.logging import RATE_LIMITED

log = logging.getLogger("servicekit.http")

_HEADER, _BODY = "header", "body"
_RESPONSE_408 = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_RESPONSE_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n"
    b"retry-after: 1\r\n\r\n"
)


@dataclass(frozen=True)
class HttpLimits:
    """What one HTTP server process allows its clients; each service's config overrides these
    defaults (`SCHEDULER_HTTP_*`, `NOTIFICATION_HTTP_*`)."""

    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    keep_alive_seconds: float = 5.0
    max_connections: int = 2048
    backlog: int = 2048

    @classmethod
    def of(cls, settings: object) -> HttpLimits:
        """From a service's settings, whose fields are these names prefixed `http_`."""
        return cls(**{f.name: getattr(settings, f"http_{f.name}") for f in fields(cls)})


class DeadlineH11Protocol(H11Protocol):
    """Subclassed per server by `protocol_class(limits)`; uvicorn builds one per connection."""

    limits: ClassVar[HttpLimits] = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: str | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.server_state.connections) >= self.limits.max_connections:
            self._refused = True
            self.transport = transport
            transport.write(_RESPONSE_503)
            transport.close()
            log.warning(
                "http: refused a connection, %d open (the limit)",
                self.limits.max_connections,
                extra={RATE_LIMITED: True},
            )
            return
        super().connection_made(transport)
        self._arm(_HEADER)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if not self._refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._phase is None and self.conn.their_state is h11.IDLE:
            self._arm(_HEADER)  # the first byte of a keep-alive request
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()  # a pipelined request may have been parsed from the buffer

    def _follow(self) -> None:
        """Move the deadline along with h11's view of the client's side of the exchange."""
        state = self.conn.their_state
        if self._phase == _HEADER and state is not h11.IDLE:
            self._disarm()
            if state is h11.SEND_BODY:
                self._arm(_BODY)
        elif self._phase == _BODY and state is not h11.SEND_BODY:
            self._disarm()
        elif self._phase is None and state is h11.IDLE and self.conn.trailing_data[0]:
            self._arm(_HEADER)  # part of a pipelined request is waiting in the buffer

    def _arm(self, phase: str) -> None:
        self._disarm()
        seconds = (
            self.limits.header_timeout_seconds
            if phase == _HEADER
            else self.limits.body_timeout_seconds
        )
        self._phase = phase
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None
        self._phase = None

    def _expired(self) -> None:
        phase, self._deadline, self._phase = self._phase, None, None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        waiting = phase == _BODY and cycle is not None and not cycle.response_complete
        if phase == _HEADER or cycle is None or not cycle.response_started:
            self.transport.write(_RESPONSE_408)  # nothing answered this request yet
        if waiting and cycle is not None:
            # The app waiting for the body gets http.disconnect; whatever it sends is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        self._unset_keepalive_if_required()
        self.transport.close()
        if phase == _HEADER:
            log.info(
                "http: closed a connection, request headers not complete within %s s",
                self.limits.header_timeout_seconds,
                extra={RATE_LIMITED: True},
            )
        else:
            log.info(
                "http: closed a connection, request body not complete within %s s",
                self.limits.body_timeout_seconds,
                extra={RATE_LIMITED: True},
            )


def protocol_class(limits: HttpLimits) -> type[DeadlineH11Protocol]:
    """A protocol class bound to `limits`, for `uvicorn.Config(http=...)`."""
    return type("BoundDeadlineH11Protocol", (DeadlineH11Protocol,), {"limits": limits})
