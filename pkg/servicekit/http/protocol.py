"""uvicorn's h11 protocol with the read deadlines and the connection cap uvicorn lacks.

uvicorn bounds only the idle time between requests (`timeout_keep_alive`), and resets even that on
every byte, so a client that trickles a request line, headers or a declared body holds its
connection (and a file descriptor) for as long as it likes. ASGI middleware cannot help: it runs
once the headers are parsed. Per connection, this protocol adds:

- a header deadline: the request line and headers must be complete within `header_timeout_seconds`
  of the connection opening or of the first byte of the next keep-alive request;
- a body deadline: a declared or chunked body must be complete within `body_timeout_seconds` of
  its headers (also after an early answer such as 401 or 413, which keeps reading it);
- a write deadline: a response the client does not read for `write_timeout_seconds` (the
  transport's buffer stays above its high-water mark and uvicorn waits in `drain`, or the
  connection is closing with bytes still to flush) aborts the connection, else a client that
  sends requests and never reads holds it for ever;
- a cap: past `max_connections` open connections a new one gets `503` and is closed at once, so
  descriptors stay bounded instead of running out;
- a lingering close: when uvicorn closes after an early answer (a 413, a 401) while the client is
  still sending its body, the write side is shut down (the answer and a FIN go out) and the rest of
  the body is read and discarded until it ends, the client closes, the body deadline passes or
  `LINGER_SECONDS` have passed. Closing at once with unread bytes makes the kernel send a reset,
  and the client sees ECONNRESET instead of the answer (nginx's `lingering_close`).

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
LINGER_SECONDS = 10.0
"""At most this long discarding the rest of a body after an early answer: an honest client's upload
of tens of MB finishes well within it on a LAN; a slower one gets the reset (it could hold
the connection as long by trickling a body within its deadline)."""
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
    write_timeout_seconds: float = 30.0
    request_timeout_seconds: float = 8.0
    """Applied by `RequestDeadlineMiddleware` (the apps), not by the protocol. 8 s: an answer
    within 10 s even when the event loop is slow to run the timer."""
    keep_alive_seconds: float = 5.0
    max_connections: int = 2048
    backlog: int = 2048

    @classmethod
    def of(cls, settings: object) -> HttpLimits:
        """From a service's settings, whose fields are these names prefixed `http_`."""
        return cls(**{f.name: getattr(settings, f"http_{f.name}") for f in fields(cls)})


class _LingeringTransport:
    """The transport uvicorn sees: `close()` lingers (see the module docstring) when the client
    is still sending a body; everything else is the socket transport's."""

    def __init__(self, transport: asyncio.Transport, protocol: DeadlineH11Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def close(self) -> None:
        if not self._protocol._linger():
            self._protocol._close_now()

    def is_closing(self) -> bool:
        return self._protocol._lingering or self._transport.is_closing()


class DeadlineH11Protocol(H11Protocol):
    """Subclassed per server by `protocol_class(limits)`; uvicorn builds one per connection."""

    limits: ClassVar[HttpLimits] = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: str | None = None
        self._refused = False
        self._lost = False
        self._lingering = False
        self._linger_end: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None
        self._raw: asyncio.Transport | None = None

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
        self._raw = transport
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]
        self._arm(_HEADER)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._disarm()
        for handle in (self._linger_end, self._write_deadline):
            if handle is not None:
                handle.cancel()
        if not self._refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._lingering:
            self._discard(data)
            return
        if self._phase is None and self.conn.their_state is h11.IDLE:
            self._arm(_HEADER)  # the first byte of a keep-alive request
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()  # a pipelined request may have been parsed from the buffer

    def pause_writing(self) -> None:
        super().pause_writing()
        self._arm_write()

    def _arm_write(self) -> None:
        if self._write_deadline is None and not self._refused:
            self._write_deadline = self.loop.call_later(
                self.limits.write_timeout_seconds, self._write_expired
            )

    def resume_writing(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None
        super().resume_writing()

    def _write_expired(self) -> None:
        self._write_deadline = None
        if self._raw is None:
            return
        # The buffered response may never be flushed: abort (close() would wait for it).
        # connection_lost then ends the cycle: the app's pending send returns, it is disconnected.
        self._raw.abort()
        log.info(
            "http: aborted a connection, the client did not read its response for %s s",
            self.limits.write_timeout_seconds,
            extra={RATE_LIMITED: True},
        )

    def _linger(self) -> bool:
        """Called for uvicorn's close(): shut down the write side and keep discarding the body
        instead, when the client is still sending one. False: close now."""
        raw = self._raw
        if (
            self._lingering
            or self._lost
            or raw is None
            or raw.is_closing()
            or not raw.can_write_eof()
            or self.conn.their_state is not h11.SEND_BODY
        ):
            return False
        self._lingering = True
        self._unset_keepalive_if_required()
        raw.write_eof()  # after the buffered answer: the client reads it, then our FIN
        if not raw.is_reading():
            raw.resume_reading()  # uvicorn paused reading while the app held the body
        self._linger_end = self.loop.call_later(LINGER_SECONDS, self._close_now)
        self._discard(b"")  # h11 may hold the body's end already
        return True

    def _discard(self, data: bytes) -> None:
        """Feed `data` to h11 and drop the body it carries; close once the body ended."""
        try:
            if data:  # h11 takes b"" for the client's EOF
                self.conn.receive_data(data)
            while self.conn.their_state is h11.SEND_BODY:
                if self.conn.next_event() is h11.NEED_DATA:
                    return
        except h11.RemoteProtocolError:
            pass
        self._close_now()

    def _close_now(self) -> None:
        self._disarm()
        if self._linger_end is not None:
            self._linger_end.cancel()
            self._linger_end = None
        if self._raw is not None:
            if self._raw.get_write_buffer_size():
                # close() waits to flush; a client that never reads would hold the connection
                # for ever, even with less buffered than the high-water mark (no pause_writing).
                self._arm_write()
            self._raw.close()

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
        if self._lingering:
            self._close_now()  # the answer is out; the rest of the body is not worth waiting for
            return
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
        self._close_now()
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
