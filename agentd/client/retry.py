"""When a post may be sent again without risk of storing it twice.

Only two failures are retried: ``429`` (the daemon refused it before storing anything, and
said when to come back in ``Retry-After``) and a connection that could not be opened (the
request never left). A timeout or a connection dropped after sending is not retried: the
daemon may have stored the message, and a second post would be a second message.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import httpx

from agentd.client.backoff import Backoff
from agentd.client.errors import ApiError, DaemonUnreachable

#: How long, by default, a client keeps posting again while the daemon is busy or unreachable.
DEFAULT_PATIENCE = 60.0


@dataclass
class Patience:
    """How long one post keeps being retried (``seconds`` from its first try); ``wait_after`` decides."""

    seconds: float
    started: float = field(default_factory=time.monotonic)
    backoff: Backoff = field(default_factory=lambda: Backoff(first=0.5, cap=10.0))

    def wait_after(self, exc: Exception) -> float | None:
        """Seconds to wait before posting again after ``exc``; ``None``: do not retry (raise it)."""
        if isinstance(exc, ApiError) and exc.status == 429:
            asked = exc.retry_after
            # A little jitter above what was asked, so clients refused together do not return together.
            wait = asked * (1.0 + 0.25 * random.random()) if asked is not None else self.backoff.next()
        elif isinstance(exc, DaemonUnreachable) and isinstance(exc.__cause__, httpx.ConnectError):
            wait = self.backoff.next()
        else:
            return None
        if time.monotonic() + wait - self.started > self.seconds:
            return None
        return wait


__all__ = ["DEFAULT_PATIENCE", "Patience"]
