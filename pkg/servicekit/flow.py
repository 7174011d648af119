"""Flow control per destination (DESIGN.md §7b "Flow control"), pure: no I/O, no clock of its
own. Both services' dispatchers use it (the scheduler keeps the state in its `destinations`
table, notification in its own), so a tenant's limits and a destination's signals mean the same
everywhere.

- A destination is `host:port` (`parse_destination`: lower-cased host, IDN as punycode, port
  1-65535; the scheme's default port is written out by whoever derives it from a URL).
- A `DestinationPolicy` is what a tenant sets: `max_in_flight` (1-100) and `per_second`
  (0.1-1000, or None: no rate). A destination without one gets `DEFAULT_POLICY` (10 in flight,
  no rate; the services' settings may change the default).
- A `FlowState` is what the destination told us, with its expiry:
  - `held_until`: a 429 or 503 with `Retry-After` holds the whole destination until then (at
    most `MAX_HOLD_SECONDS`). A later, shorter Retry-After never shortens a hold. The token
    bucket restarts at its end with one token: the runs it held go out at the rate, not at once.
  - `current_rate` (AIMD): a 429 halves it. Its starting point is the policy's `per_second`,
    else the current rate, else the rate observed in the answers that carried the 429
    (`observed_rate`: answers per second over the span of their attempts, bounded below by
    one second so a burst does not look like an infinite rate). A 429 with Retry-After halves
    it too (a 429 is a rate signal either way; the hold is the destination's explicit ask on
    top); a 503 with Retry-After only holds (an outage is not a rate). Fine answers (2xx) make
    it grow back additively, for each second since the last change: slowly, by
    `RECOVERY_PER_SECOND` (or `RECOVERY_FRACTION` of the policy's rate, if more), probing for
    more; and once a 429 came while probing, the rate it came at is `cut_from` (the
    destination's limit, as far as we know) and the climb back starts fast
    (`REGAIN_PER_SECOND` of `cut_from`) up to `REGAIN_TO` of it (under it, by more than the
    overshoot a destination's own burst allowance hides before its first 429). A first cut,
    or one during the fast step, sets no `cut_from`: it says only "less". Up to the policy's
    rate (then the adaptive rate is dropped). Without the fast step the rate climbed from half
    the limit at 1/s and averaged 3/4 of it (600 runs to a destination allowing 20/s drained
    in 1.2-1.4 x the ideal). Without a policy rate the adaptive rate expires
    `ADAPTIVE_TTL_SECONDS` after the last 429. One cut per `CUT_GUARD_SECONDS`: the 429s of
    requests sent before a cut do not cut again. A cut voids the tokens reserved at the old
    rate (the bucket's debt: it restarts empty), so the runs they were for are paced at the
    new rate instead of going out at the old one for up to `MAX_RESERVE_SECONDS`.
  - `tokens`/`tokens_at`: the token bucket of the effective rate (the lower of the policy's
    and the adaptive one), refilled by time, at most `BURST_SECONDS` worth (at least 1); a
    deferred run may reserve its token ahead (the bucket in debt, `MAX_RESERVE_SECONDS` at
    most), so the runs of later claims queue behind it.
- `admit` decides a claim: how many of `wanted` attempts may start now (not held, under
  `max_in_flight` with what is in flight, a token each), and when each of the others should be
  due again (the hold's end; the instant its token will be there; or a short spread wait for a
  slot), so deferred runs come back paced instead of spinning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum

__all__ = [
    "ADAPTIVE_TTL_SECONDS",
    "DEFAULT_POLICY",
    "MAX_HOLD_SECONDS",
    "Admission",
    "DestinationPolicy",
    "FlowAnswer",
    "FlowState",
    "Signal",
    "admit",
    "answers_signal",
    "effective_rate",
    "observed_rate",
    "parse_destination",
    "react",
    "react_to_answers",
    "signal_of",
    "tenant_policy",
]

MAX_IN_FLIGHT = (1, 100)
PER_SECOND = (0.1, 1000.0)
MAX_DEFAULT_IN_FLIGHT = 10_000
MAX_HOLD_SECONDS = 3600.0
MIN_RATE = PER_SECOND[0]
MAX_RATE = PER_SECOND[1]
RECOVERY_PER_SECOND = 1.0
"""Additive increase: requests/s gained for each second of fine answers (at least)."""
RECOVERY_FRACTION = 0.1
"""With a tenant's rate, the increase is at least this fraction of it per second."""
REGAIN_TO = 0.8
"""The fast step climbs back to this fraction of the rate the last cut was made at."""
REGAIN_PER_SECOND = 0.5
"""The fast step: this fraction of the rate the last cut was made at, per second."""
ADAPTIVE_TTL_SECONDS = 300.0
BURST_SECONDS = 1.0
SLOT_WAIT_SECONDS = 0.1
"""A run that found the destination's in-flight limit reached is due again after this (or the
destination's attempt duration, if longer), times its turn among the deferred: a slot frees
when an attempt ends, so the deferred come back about when slots free instead of spinning
(the dispatcher also makes them due at once when its own attempts there end)."""
SLOT_WAIT_MAX_SECONDS = 2.0
BEYOND_MAX_SECONDS = 10.0
"""A deferred run beyond the reserved window is due again at its would-be instant, or after
this at most: the rate may have changed by then (a collapsed adaptive rate recovers)."""
CUT_GUARD_SECONDS = 1.0
"""A 429 within this of the last cut does not cut again (it answers a request sent before)."""
MAX_RESERVE_SECONDS = 2.0
"""How far ahead tokens may be reserved for deferred runs (the bucket's debt, in seconds of
the rate). Short: an instant reserved at today's rate would hold a run back after the
rate recovered; the runs beyond come back at their would-be instant and reserve then."""
MAX_DESTINATION_CHARS = 261  # 253 (a DNS name) + ':' + 5 digits + 2 (IPv6 brackets)


@dataclass(frozen=True, slots=True)
class DestinationPolicy:
    """A tenant sets `max_in_flight` 1-100 (`tenant_policy`); an operator's default may be
    higher (up to `MAX_DEFAULT_IN_FLIGHT`)."""

    max_in_flight: int = 10
    per_second: float | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.max_in_flight <= MAX_DEFAULT_IN_FLIGHT:
            raise ValueError(f"max_in_flight must be 1-{MAX_DEFAULT_IN_FLIGHT}")
        if self.per_second is not None and not (
            math.isfinite(self.per_second) and PER_SECOND[0] <= self.per_second <= PER_SECOND[1]
        ):
            raise ValueError(f"per_second must be {PER_SECOND[0]}-{PER_SECOND[1]:g} or null")


DEFAULT_POLICY = DestinationPolicy()


def tenant_policy(max_in_flight: int, per_second: float | None) -> DestinationPolicy:
    """A policy a tenant sets: `max_in_flight` 1-100, `per_second` 0.1-1000 or None."""
    lo, hi = MAX_IN_FLIGHT
    if not lo <= max_in_flight <= hi:
        raise ValueError(f"max_in_flight must be {lo}-{hi}")
    return DestinationPolicy(max_in_flight, per_second)


def parse_destination(text: str) -> str:
    """The canonical `host:port` of `text`, or ValueError naming what is wrong."""
    if not text or len(text) > MAX_DESTINATION_CHARS or text != text.strip():
        raise ValueError("a destination is host:port")
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError("a destination is host:port")
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535 or port[0] == "0":
        raise ValueError("the port must be 1-65535")
    if host.startswith("["):
        if not host.endswith("]") or not _is_ipv6(host[1:-1]):
            raise ValueError("not an IPv6 address in brackets")
        return f"{host.lower()}:{int(port)}"
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise ValueError("not a valid host name") from exc
    labels = ascii_host.rstrip(".").split(".")
    if len(ascii_host) > 253 or not all(_is_label(label) for label in labels):
        raise ValueError("not a valid host name")
    return f"{ascii_host.rstrip('.')}:{int(port)}"


def _is_label(label: str) -> bool:
    return (
        0 < len(label) <= 63
        and label[0] != "-"
        and label[-1] != "-"
        and all(c.isascii() and (c.isalnum() or c in "-_") for c in label)
    )


def _is_ipv6(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class FlowState:
    held_until: datetime | None = None
    current_rate: float | None = None
    """The adaptive rate (requests/s), None when no 429 asked for one (or it expired)."""
    rate_at: datetime | None = None
    """When current_rate last changed (additive increase counts from here)."""
    cut_at: datetime | None = None
    """The last cut (a 429): the adaptive rate expires ADAPTIVE_TTL_SECONDS after it."""
    cut_from: float | None = None
    """The rate the last cut halved when it was a probed rate (`_probed`): the fast step
    climbs back to REGAIN_TO of it. None: the climb is slow all the way."""
    tokens: float | None = None
    tokens_at: datetime | None = None

    def held(self, now: datetime) -> bool:
        return self.held_until is not None and self.held_until > now

    def live(self, now: datetime) -> FlowState:
        """The state as of `now`: an ended hold and an expired adaptive rate are dropped."""
        state = self
        if state.held_until is not None and state.held_until <= now:
            state = replace(state, held_until=None)
        if state.cut_at is not None and (now - state.cut_at).total_seconds() > ADAPTIVE_TTL_SECONDS:
            state = replace(state, current_rate=None, rate_at=None, cut_at=None, cut_from=None)
        return state

    @property
    def empty(self) -> bool:
        return self.held_until is None and self.current_rate is None


NO_STATE = FlowState()


def effective_rate(policy: DestinationPolicy, state: FlowState) -> float | None:
    rates = [r for r in (policy.per_second, state.current_rate) if r is not None]
    return min(rates) if rates else None


class Signal(Enum):
    FINE = "fine"
    SLOW_DOWN = "slow_down"  # 429
    HOLD = "hold"  # 503 + Retry-After
    SLOW_DOWN_AND_HOLD = "slow_down_and_hold"  # 429 + Retry-After


def signal_of(status_code: int | None, retry_after_seconds: float | None) -> Signal | None:
    """What an answer tells flow control (None: nothing, e.g. a 500 or a network error, which
    the run's own retry policy handles)."""
    if status_code is None:
        return None
    if 200 <= status_code < 300:
        return Signal.FINE
    if status_code == 429:
        return Signal.SLOW_DOWN if retry_after_seconds is None else Signal.SLOW_DOWN_AND_HOLD
    if status_code == 503 and retry_after_seconds is not None:
        return Signal.HOLD
    return None


def observed_rate(starts: list[datetime]) -> float:
    """Attempts per second over the span of their starts (at least one second)."""
    if not starts:
        return MIN_RATE
    span = max((max(starts) - min(starts)).total_seconds(), 1.0)
    return min(max(len(starts) / span, MIN_RATE), MAX_RATE)


def react(
    state: FlowState,
    policy: DestinationPolicy,
    signal: Signal,
    now: datetime,
    *,
    retry_after_seconds: float | None = None,
    observed: float | None = None,
) -> FlowState:
    """The state after one answer's signal (apply the worst of a batch: see `worst`)."""
    state = state.live(now)
    if signal in (Signal.HOLD, Signal.SLOW_DOWN_AND_HOLD):
        wait = min(max(retry_after_seconds or 0.0, 0.0), MAX_HOLD_SECONDS)
        until = now + timedelta(seconds=wait)
        if state.held_until is None or until > state.held_until:
            # The bucket holds one token at the hold's end: the first run goes then, the rest
            # at the rate, not in one burst (tokens reserved before the hold are void).
            state = replace(state, held_until=until, tokens=1.0, tokens_at=until)
    if signal in (Signal.SLOW_DOWN, Signal.SLOW_DOWN_AND_HOLD):
        if state.cut_at is not None and (now - state.cut_at).total_seconds() < CUT_GUARD_SECONDS:
            return state  # the 429s of requests sent before the last cut: one cut per second
        start = state.current_rate or policy.per_second or observed or MAX_RATE
        if policy.per_second is not None:
            start = min(start, policy.per_second)
        rate = max(start / 2, MIN_RATE)
        cut_from = start if _probed(state) else None
        state = replace(state, current_rate=rate, rate_at=now, cut_at=now, cut_from=cut_from)
        if state.tokens is not None and state.tokens < 0:  # reservations void: restart empty
            return replace(state, tokens=0.0, tokens_at=now)
        tokens = None if state.tokens is None else min(state.tokens, _burst(rate))
        return replace(state, tokens=tokens)
    if signal is Signal.FINE and state.current_rate is not None and state.rate_at is not None:
        grown = _grown(state.current_rate, state.cut_from, policy, now - state.rate_at)
        if policy.per_second is not None and grown >= policy.per_second:
            return replace(state, current_rate=None, rate_at=None, cut_at=None, cut_from=None)
        return replace(state, current_rate=min(grown, MAX_RATE), rate_at=now)
    return state


def _probed(state: FlowState) -> bool:
    """Whether the adaptive rate had grown back to where it probes (past the fast step)
    since its last cut: a rate the destination accepted until now, so a 429 there says
    where its limit is. A first cut (from a policy's or an observed rate) and a cut during
    the fast step say only "less"."""
    rate, grown_at, cut_at = state.current_rate, state.rate_at, state.cut_at
    if rate is None or grown_at is None or cut_at is None or grown_at <= cut_at:
        return False
    return state.cut_from is None or rate >= state.cut_from * REGAIN_TO * (1 - 1e-9)


def _grown(rate: float, cut_from: float | None, policy: DestinationPolicy, dt: timedelta) -> float:
    """The adaptive rate after `dt` of fine answers: the fast step up to REGAIN_TO x
    `cut_from`, then the slow one (module docstring)."""
    seconds = max(dt.total_seconds(), 0.0)
    if cut_from is not None:
        room = cut_from * REGAIN_TO - rate
        if room > 0:
            fast = cut_from * REGAIN_PER_SECOND
            if seconds * fast <= room:
                return rate + seconds * fast
            seconds -= room / fast
            rate += room
    step = RECOVERY_PER_SECOND
    if policy.per_second is not None:  # back to the tenant's rate in ~1 / fraction seconds
        step = max(step, policy.per_second * RECOVERY_FRACTION)
    return rate + step * seconds


def worst(signals: list[Signal]) -> Signal | None:
    """One batch's answers from a destination as one reaction: a 429 or a hold wins over fine
    answers (those came back before the destination pushed back)."""
    if not signals:
        return None
    order = (Signal.SLOW_DOWN_AND_HOLD, Signal.HOLD, Signal.SLOW_DOWN, Signal.FINE)
    return next(s for s in order if s in signals)


@dataclass(frozen=True, slots=True)
class FlowAnswer:
    """What one attempt's answer tells flow control (either service's attempt)."""

    started_at: datetime
    status_code: int | None
    retry_after_seconds: float | None


def answers_signal(answers: Sequence[FlowAnswer]) -> Signal | None:
    """The one signal of a batch of a destination's answers (`worst`), None when none tells
    flow control anything."""
    return worst([s for a in answers if (s := signal_of(a.status_code, a.retry_after_seconds))])


def react_to_answers(
    state: FlowState,
    policy: DestinationPolicy,
    signal: Signal,
    answers: Sequence[FlowAnswer],
    now: datetime,
) -> FlowState:
    """`react` to a batch's signal (`answers_signal`): the longest Retry-After among the
    answers holds, the rate they were sent at is the cut's starting point if need be."""
    waits = [a.retry_after_seconds for a in answers if a.retry_after_seconds is not None]
    return react(
        state,
        policy,
        signal,
        now,
        retry_after_seconds=max(waits) if waits else None,
        observed=observed_rate([a.started_at for a in answers]),
    )


def _burst(rate: float) -> float:
    return max(1.0, rate * BURST_SECONDS)


@dataclass(frozen=True, slots=True)
class Admission:
    granted: int
    """How many of the wanted attempts may start now (the first ones, in claim order)."""
    due_again: list[datetime]
    """When each of the others (wanted - granted, in order) should be due again."""
    state: FlowState
    """The state with the granted (and reserved) tokens taken."""
    for_slot: list[bool] = field(default_factory=list)
    """Per deferred run: True when it waits for an in-flight slot (not for a hold or a token),
    so an attempt's end may make it due sooner than `due_again`."""
    reserved: list[datetime | None] = field(default_factory=list)
    """Per deferred run: the instant from which the token taken for it now is its (it comes
    back as one of a later call's `prepaid`), or None when it holds none."""


def admit(
    policy: DestinationPolicy,
    state: FlowState,
    now: datetime,
    *,
    in_flight: int,
    wanted: int,
    prepaid: int = 0,
    reserve: bool = False,
    slot_seconds: float = SLOT_WAIT_SECONDS,
) -> Admission:
    """How many of `wanted` attempts to one destination may start now, `in_flight` being those
    already under way there (every worker's). The first `prepaid` of them hold a token
    reserved earlier for an instant now past (they need a slot only; a hold gives their
    tokens back). `reserve`: a run deferred for want of a token takes the next one now (the
    bucket goes into debt, at most `MAX_RESERVE_SECONDS` of the rate) and is due at its
    instant, so the next claim's runs queue behind it instead of colliding with it.
    `slot_seconds`: how long an attempt there takes (a run deferred for a slot comes back
    about then, times its turn; at most `SLOT_WAIT_MAX_SECONDS`)."""
    state = state.live(now)
    if wanted <= 0:
        return Admission(0, [], state)
    prepaid = min(max(prepaid, 0), wanted)
    rate = effective_rate(policy, state)
    until = state.held_until
    if until is not None:  # live(): still in the future
        if prepaid and rate is not None and state.tokens is not None:
            # Their reserved tokens go back: after the hold they take fresh ones.
            state = replace(state, tokens=min(state.tokens + prepaid, _burst(rate)))
        return Admission(0, [until] * wanted, state, [False] * wanted, [None] * wanted)
    slots = max(policy.max_in_flight - in_flight, 0)
    if rate is None:
        granted = min(slots, wanted)
        n = wanted - granted
        slot_waits = [
            now + timedelta(seconds=_slot_wait_seconds(k, policy, slot_seconds)) for k in range(n)
        ]
        return Admission(granted, slot_waits, state, [True] * n, [None] * n)
    burst = _burst(rate)
    tokens = burst if state.tokens is None or state.tokens_at is None else state.tokens
    if state.tokens_at is not None:
        tokens = min(burst, tokens + rate * max((now - state.tokens_at).total_seconds(), 0.0))
    granted = min(slots, prepaid)
    fresh = max(min(slots - granted, wanted - prepaid, math.floor(tokens + 1e-9)), 0)
    granted += fresh
    tokens -= fresh
    left = tokens
    waits: list[datetime] = []
    for_slot: list[bool] = []
    reserved: list[datetime | None] = []
    floor = -rate * MAX_RESERVE_SECONDS
    beyond = 0
    for k, i in enumerate(range(granted, wanted)):
        slot_at = _slot_wait_seconds(k, policy, slot_seconds) if i >= slots else 0.0
        if i < prepaid:  # holds its token: waits for a slot only
            token_at, has = 0.0, True
        elif reserve and tokens - 1 >= floor:
            token_at, has = max((1 - tokens) / rate, 0.0), True
            tokens -= 1
        elif reserve:  # the debt is at its bound: back soon (the rate may change), no token
            token_at = min((1 - tokens + beyond) / rate, BEYOND_MAX_SECONDS + beyond / MAX_RATE)
            has = False
            beyond += 1
        else:
            # The k-th deferred run's token arrives after (k + 1 - left) / rate seconds.
            token_at, has = max((k + 1 - left) / rate, 0.0), False
        waits.append(now + timedelta(seconds=max(token_at, slot_at)))
        for_slot.append(slot_at > token_at)
        reserved.append(now + timedelta(seconds=token_at) if has else None)
    state = replace(state, tokens=tokens, tokens_at=now)
    return Admission(granted, waits, state, for_slot, reserved)


def _slot_wait_seconds(k: int, policy: DestinationPolicy, slot_seconds: float) -> float:
    turn = 1 + k // policy.max_in_flight
    base = min(max(slot_seconds, SLOT_WAIT_SECONDS), SLOT_WAIT_MAX_SECONDS)
    return min(base * turn, SLOT_WAIT_MAX_SECONDS)
