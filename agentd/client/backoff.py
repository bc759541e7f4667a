"""Reconnect delays: exponential, capped, with jitter (so many clients do not retry in step)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """``next()`` gives the delay before the next attempt; ``reset()`` after a success.

    Delays grow from ``first`` by ``factor`` up to ``cap`` seconds; each is drawn
    from [``1 - jitter``, 1] of that (never below ``floor``, e.g. the server's SSE
    ``retry:``).
    """

    first: float = 0.5
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 0.3
    floor: float = 0.0
    attempts: int = field(default=0, init=False)

    def next(self) -> float:
        """The delay before the next attempt (and count it)."""
        base = min(self.cap, self.first * self.factor**self.attempts)
        self.attempts += 1
        return max(self.floor, base * (1.0 - self.jitter * random.random()))

    def reset(self) -> None:
        """The last attempt succeeded: start again from ``first``."""
        self.attempts = 0
