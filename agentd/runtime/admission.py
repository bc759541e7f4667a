"""Admission control: the intake's bound on work accepted and not yet answered.

A message is admitted (stage 2 of :class:`~agentd.runtime.intake.Intake`) only while this
daemon has fewer than its bound of messages waiting for a reply, and the (persona, channel)
it goes to fewer than its own; else :class:`~agentd.Overloaded` (HTTP 429 with ``Retry-After``)
is raised before anything is stored, so the caller may simply post again.

The bounds follow from a wait, not from a guessed count (``[daemon] admission_wait_seconds``,
*W*; docs/guides/overload.md):

* the daemon's is *W* × the replies per second it measures (a moving average of answered turns
  per second of busy time, from :data:`START_RATE`), at least :data:`MIN_PENDING`;
* a (persona, channel)'s, answered one turn at a time, is *W* ÷ the seconds a turn takes (a
  moving average over every channel, from :data:`START_TURN_SECONDS`, of the time from when a
  turn could start, i.e. its admission or the previous reply in its channel, until its reply),
  at least :data:`MIN_PENDING_PER_CHANNEL`.

The averages move faster towards more room than towards less (:data:`FAST`, :data:`SLOW`): a
bound measures the daemon only as far as it lets work in, so a low estimate (a cold first
turn, a quiet spell with one busy channel) must not hold the bound down for long.

``[daemon] max_pending`` / ``max_pending_per_channel`` fix either bound instead. What is
counted is what this daemon accepted: each admitted message holds a :class:`Ticket` until its
turn's ``Done`` or ``Error`` reaches the request's sink, whichever dispatcher answered it (local
actors, a worker process, or, in a cluster, the channel's owner). A ticket whose end never came
(an event lost between daemons) is dropped after :data:`STALE_SECONDS`.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentd._exceptions import Overloaded
from agentd.config import DaemonConfig
from agentd.runtime.events import Done, Error, Event
from agentd.runtime.messages import ActorKey, Sink

#: Replies per second assumed until the first is measured (the daemon's bound starts at W × this).
START_RATE = 4.0
#: Seconds per turn assumed until the first is measured.
START_TURN_SECONDS = 1.0
#: The daemon's derived bound is never below this many messages.
MIN_PENDING = 4
#: A (persona, channel)'s derived bound is never below this many: people send a few lines in a
#: row (a burst the next turn reads as one), and a slow model must not turn the second into a 429.
MIN_PENDING_PER_CHANNEL = 3
#: Seconds of busy time (something waiting for a reply) per sample of the reply rate.
RATE_WINDOW = 1.0
#: Weight of a new sample in the moving averages when it gives more room (a higher rate, a
#: shorter turn), and when it gives less.
FAST = 0.5
SLOW = 0.2
#: A ticket held this long is dropped (its turn's end never reached this daemon).
STALE_SECONDS = 3600.0


@dataclass(frozen=True)
class Ticket:
    """One admitted message, held until its turn ends."""

    number: int
    key: ActorKey
    at: float


@dataclass(frozen=True)
class Bounds:
    """The bounds in force, what they hold now, and the measures they come from."""

    pending: int
    max_pending: int
    max_pending_per_channel: int
    replies_per_second: float
    turn_seconds: float
    #: Posts refused since start.
    refused: int


class Admission:
    """Admits messages while this daemon and the message's (persona, channel) are under their bounds."""

    def __init__(self, config: DaemonConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._wait = config.admission_wait_seconds
        self._fixed = config.max_pending
        self._fixed_channel = config.max_pending_per_channel
        self._clock = clock
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._held: dict[int, Ticket] = {}
        self._per_key: dict[ActorKey, int] = {}
        self._last_done: dict[ActorKey, float] = {}
        self._rate = START_RATE
        self._turn = START_TURN_SECONDS
        self._busy = 0.0
        self._done_in_window = 0
        self._refused = 0
        self._changed = clock()

    def admit(self, persona: str, channel: str, *, share: float = 1.0) -> Ticket:
        """A ticket for one more message to ``persona`` in ``channel``; :class:`Overloaded` past a bound.

        ``share``: admit only while the daemon holds less than this fraction of its bound (schedules
        firing take at most part of it, so people's messages always find room)."""
        with self._lock:
            now = self._clock()
            self._check(persona, channel, now, share)
            return self._take(persona, channel, now)

    def hold(self, persona: str, channel: str) -> Ticket:
        """A ticket for work already stored that cannot be refused (a persona's call on another in a
        room, stored with its reply): it counts toward the bounds, so people's messages see it."""
        with self._lock:
            return self._take(persona, channel, self._clock())

    def _take(self, persona: str, channel: str, now: float) -> Ticket:
        key = (persona, channel)
        self._account(now)
        ticket = Ticket(next(self._numbers), key, now)
        self._held[ticket.number] = ticket
        self._per_key[key] = self._per_key.get(key, 0) + 1
        return ticket

    def check(self, persona: str, channel: str) -> None:
        """:class:`Overloaded` if a message to ``persona`` in ``channel`` would be refused now (nothing held)."""
        with self._lock:
            self._check(persona, channel, self._clock())

    def release(self, ticket: Ticket, answered: bool = True) -> None:
        """``ticket``'s turn ended (``answered``: it ran; False: it was never stored). Idempotent."""
        with self._lock:
            if self._held.pop(ticket.number, None) is None:
                return
            now = self._clock()
            self._account(now, ending=1)  # the busy time up to now includes this ticket
            key = ticket.key
            left = self._per_key[key] - 1
            if answered:
                started = max(ticket.at, self._last_done.get(key, ticket.at))
                sample = now - started
                self._turn += (FAST if sample < self._turn else SLOW) * (sample - self._turn)
                self._done_in_window += 1
                if self._busy >= RATE_WINDOW:
                    sample = self._done_in_window / self._busy
                    self._rate += (FAST if sample > self._rate else SLOW) * (sample - self._rate)
                    self._busy, self._done_in_window = 0.0, 0
            if left:
                self._per_key[key] = left
                self._last_done[key] = now
            else:
                del self._per_key[key]
                self._last_done.pop(key, None)

    def watch(self, ticket: Ticket, sink: Sink) -> Sink:
        """``sink``, releasing ``ticket`` on the turn's ``Done`` or ``Error`` (before passing it on)."""

        def emit(event: Event) -> None:
            if isinstance(event, Done | Error):
                self.release(ticket)
            sink(event)

        return emit

    def bounds(self) -> Bounds:
        """The bounds in force now and what they are derived from."""
        with self._lock:
            held, limit, key_limit = len(self._held), self._limit(), self._key_limit()
            return Bounds(held, limit, key_limit, round(self._rate, 3), round(self._turn, 3), self._refused)

    # -- internals ----------------------------------------------------------------------------

    def _check(self, persona: str, channel: str, now: float, share: float = 1.0) -> None:
        self._drop_stale(now)
        held, in_key = len(self._held), self._per_key.get((persona, channel), 0)
        limit, key_limit = max(1, math.floor(self._limit() * share)), self._key_limit()
        if held >= limit or in_key >= key_limit:
            self._refused += 1
            raise self._refusal(persona, channel, held, limit, in_key, key_limit)

    def _limit(self) -> int:
        return self._fixed or max(MIN_PENDING, math.ceil(self._wait * self._rate))

    def _key_limit(self) -> int:
        # (a hair added: 5 s ÷ 0.5000001 s is 10 turns, not 9)
        return self._fixed_channel or max(
            MIN_PENDING_PER_CHANNEL, math.floor(self._wait / max(self._turn, 1e-3) + 1e-6)
        )

    def _account(self, now: float, ending: int = 0) -> None:
        """Add the time since the last change to the busy time if anything was held through it."""
        if len(self._held) + ending > 0:
            self._busy += max(0.0, now - self._changed)
        self._changed = now

    def _drop_stale(self, now: float) -> None:
        for number, ticket in list(self._held.items()):
            if now - ticket.at < STALE_SECONDS:
                break  # held in admission order: the rest are younger
            self._held.pop(number)
            left = self._per_key[ticket.key] - 1
            if left:
                self._per_key[ticket.key] = left
            else:
                del self._per_key[ticket.key]
                self._last_done.pop(ticket.key, None)

    def _refusal(self, persona: str, channel: str, held: int, limit: int, in_key: int, key_limit: int) -> Overloaded:
        """The error for a refused message, with how long until there is likely room again."""
        waits = [0.0]
        reasons = []
        if held >= limit:
            waits.append((held - limit + 1) / self._rate)
            how = "[daemon] max_pending" if self._fixed else f"{self._wait:g} s × {self._rate:.1f} replies/s"
            reasons.append(f"agentd has {held} messages waiting for a reply (bound {limit}: {how})")
        if in_key >= key_limit:
            waits.append((in_key - key_limit + 1) * self._turn)
            how = (
                "[daemon] max_pending_per_channel"
                if self._fixed_channel
                else f"{self._wait:g} s ÷ {self._turn:.2f} s per turn"
            )
            reasons.append(
                f"persona {persona!r} in channel {channel!r} has {in_key} messages waiting (bound {key_limit}: {how})"
            )
        retry = max(1, math.ceil(max(waits)))
        return Overloaded(f"{'; '.join(reasons)}; nothing was stored: post again in {retry} s", retry)


__all__ = ["Admission", "Bounds", "Ticket"]
