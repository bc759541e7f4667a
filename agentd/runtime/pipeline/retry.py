"""A turn's outcome that the store refused (a full disk, an I/O error, a lock held too long).

The reply is written again after growing pauses (:data:`PAUSES`, about 16 s in all), on the
actor's thread: the channel's next turn waits meanwhile, so replies keep their order. When the
store still refuses, the message is marked ``failed``; when even that cannot be written, the
responder remembers the message (:class:`Unsettled`) and marks it failed before it answers the
channel's next message, or, the store still refusing, keeps that one from being answered too.
So a message is never left pending while a later one of its channel is answered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from agentd._exceptions import AlreadyAnswered, StoreError

T = TypeVar("T")

#: Seconds between attempts to store what the store refused; the attempts stop after the last.
PAUSES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def retried(write: Callable[[], T], cancel: threading.Event, log: Any, what: str) -> T:
    """``write()``, again after each of :data:`PAUSES` while it raises :class:`StoreError` (not
    :class:`AlreadyAnswered`: that is an answer); the last error is raised. ``cancel`` (shutdown)
    ends the pauses: one last attempt is made at once."""
    for attempt, pause in enumerate(PAUSES, start=1):
        try:
            return write()
        except AlreadyAnswered:
            raise
        except StoreError as exc:
            log.warning("store_write_retried", what=what, attempt=attempt, retry_in_seconds=pause, error=exc.message)
            if cancel.wait(pause):
                break
    return write()


class Unsettled:
    """The messages of one channel whose outcome could not be stored (they are still ``pending``)."""

    def __init__(self) -> None:
        self._ids: list[int] = []

    def add(self, message_id: int) -> None:
        """Remember ``message_id``: it is marked failed before the channel's next message is answered."""
        self._ids.append(message_id)

    def settle(self, mark_failed: Callable[[int], None]) -> str | None:
        """Mark every remembered message failed, oldest first; None when done (or nothing was left),
        else why the store refused."""
        while self._ids:
            try:
                mark_failed(self._ids[0])
            except StoreError as exc:
                return exc.message
            self._ids.pop(0)
        return None


__all__ = ["PAUSES", "Unsettled", "retried"]
