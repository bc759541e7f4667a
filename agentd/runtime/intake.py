"""Accepting user messages: group commit, then dispatch in id order.

Every accepted message is durable before its caller hears ``202``. Committing
each one in its own transaction makes concurrent posts queue on the database's
one writer; here they share transactions instead (group commit). The first
caller that finds no commit under way leads: it takes every message queued so
far (its own included), stores them in one transaction, hands each stored
message to ``dispatch`` in id order, and wakes their callers. Callers that
arrive meanwhile queue, and one of them leads the next batch. A lone caller
commits at once, on its own thread: nothing waits for a batch to fill.

Batches are committed and dispatched one at a time, so the actors receive
messages in the order they were stored (a channel's replies keep their order).
If a batch cannot be stored, every caller in it gets the error and none of its
messages was stored or dispatched.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from agentd.runtime.record import Incoming
from agentd.store.messages import Message

T = TypeVar("T")
#: Stores a batch in one transaction: the stored messages, in the order given.
Commit = Callable[[Sequence[Incoming]], list[Message]]
#: Called once per stored message, in id order, before its caller returns.
Dispatch = Callable[[Message, T], None]
#: The most messages one transaction stores.
MAX_BATCH = 256


@dataclass(eq=False)
class _Pending(Generic[T]):
    item: Incoming
    then: T
    done: bool = False
    message: Message | None = None
    error: BaseException | None = field(default=None, repr=False)


class GroupCommit(Generic[T]):
    """Stores accepted messages in shared transactions; see the module docstring."""

    def __init__(
        self,
        commit: Commit,
        dispatch: Dispatch[T],
        max_batch: int = MAX_BATCH,
        guard: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        """``guard``: entered around each batch's commit and dispatch."""
        self._commit = commit
        self._dispatch = dispatch
        self._guard = guard
        self._max_batch = max(1, max_batch)
        self._queue: deque[_Pending[T]] = deque()
        self._cond = threading.Condition()
        self._leading = False
        #: How many transactions stored how many messages (for tests and the benchmark).
        self.batches = 0
        self.committed = 0

    @property
    def queued(self) -> int:
        """How many messages wait for the commit under way to end."""
        with self._cond:
            return len(self._queue)

    def submit(self, item: Incoming, then: T) -> Message:
        """Store ``item`` (with others queued at the same time), dispatch it with ``then``, return it.

        Durable when this returns. Raises what storing (or dispatching) raised.
        """
        pending = _Pending(item, then)
        with self._cond:
            self._queue.append(pending)
            while not pending.done:
                if self._leading:
                    self._cond.wait()
                    continue
                self._leading = True
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._max_batch))]
                self._cond.release()
                try:
                    with self._guard() if self._guard is not None else nullcontext():
                        self._run(batch)
                except BaseException as exc:  # the guard failed: nothing of the batch was stored
                    for p in batch:
                        if not p.done:
                            p.error, p.done = exc, True
                finally:
                    self._cond.acquire()
                    self._leading = False
                    self._cond.notify_all()
        if pending.error is not None:
            raise pending.error
        assert pending.message is not None
        return pending.message

    def _run(self, batch: list[_Pending[T]]) -> None:
        """Store ``batch`` and dispatch each message; every pending ends ``done`` (with a message or an error)."""
        try:
            try:
                messages = self._commit([p.item for p in batch])
            except BaseException as exc:
                for p in batch:
                    p.error = exc
                return
            self.batches += 1
            self.committed += len(batch)
            for p, message in zip(batch, messages, strict=True):
                p.message = message
                try:
                    self._dispatch(message, p.then)
                except BaseException as exc:  # stored (pending, answered after a restart), not dispatched
                    p.error = exc
        finally:
            for p in batch:
                p.done = True
