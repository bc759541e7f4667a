"""Waiting before trying again: the one backoff and the one ``Retry-After`` parser.

Every retry in agentd waits by :func:`delay` (a model call, :mod:`agentd.llm.chat`) or by
:class:`Backoff`, its stateful form (the client's feeds and posts, the channel adapters'
reconnections): exponential from a first delay, capped, with jitter, so that many callers
refused together do not come back together. What a server asked for in ``Retry-After``
(seconds or an HTTP date) is read by :func:`retry_after_seconds`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


def delay(
    attempt: int,
    first: float,
    cap: float,
    *,
    factor: float = 2.0,
    jitter: float = 0.5,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before try ``attempt + 1`` (``attempt`` counts from 0): ``first * factor**attempt``,
    at most ``cap``, drawn from [``1 - jitter``, 1] of that."""
    ceiling = min(cap, first * factor**attempt)
    return (rng or random).uniform(ceiling * (1.0 - jitter), ceiling)


@dataclass
class Backoff:
    """``next()`` gives the delay before the next attempt; ``reset()`` after a success.

    Delays grow from ``first`` by ``factor`` up to ``cap`` seconds; each is drawn
    from [``1 - jitter``, 1] of that (never below ``floor``, e.g. the server's SSE
    ``retry:``), by :func:`delay`.
    """

    first: float = 0.5
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 0.3
    floor: float = 0.0
    attempts: int = field(default=0, init=False)

    def next(self) -> float:
        """The delay before the next attempt (and count it)."""
        wait = delay(self.attempts, self.first, self.cap, factor=self.factor, jitter=self.jitter)
        self.attempts += 1
        return max(self.floor, wait)

    def reset(self) -> None:
        """The last attempt succeeded: start again from ``first``."""
        self.attempts = 0


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` value asks to wait: a number of seconds, or an HTTP date (from
    ``now``); never negative. ``None`` when there is none or it cannot be read."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


__all__ = ["Backoff", "delay", "retry_after_seconds"]
