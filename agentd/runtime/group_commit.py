"""Group commit: concurrent writes share transactions, each caller back once its write is durable.

Committing each write in its own transaction makes concurrent writers queue on the
database's one writer, and each transaction costs its own begin and commit (and,
under load, each of its statements waits for the GIL again). Here they share
transactions instead (group commit). The first caller that finds no commit under
way leads: it takes every item queued so far (its own included), stores them in
one transaction, hands each stored item to ``dispatch`` in order, and wakes their
callers. Callers that arrive meanwhile queue, and one of them leads the next
batch. A lone caller commits at once, on its own thread: nothing waits for a
batch to fill.

Two writes go through it: accepting user messages (every one durable before its
caller hears ``202``; batches are committed and dispatched one at a time, so the
actors receive messages in the order they were stored and a channel's replies
keep their order), and storing replies (:class:`agentd.runtime.pipeline.record.TurnWriter`).
If a batch cannot be stored, every caller in it gets the error and none of its
items was stored or dispatched.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

I = TypeVar("I")  # noqa: E741 - an item to store
S = TypeVar("S")  # what storing it gives back
T = TypeVar("T")  # what its dispatch needs
#: The most items one transaction stores.
MAX_BATCH = 256


@dataclass(eq=False)
class _Pending(Generic[I, S, T]):
    item: I
    then: T
    done: bool = False
    stored: S | None = None
    error: BaseException | None = field(default=None, repr=False)


class GroupCommit(Generic[I, S, T]):
    """Stores items in shared transactions; see the module docstring."""

    def __init__(
        self,
        commit: Callable[[Sequence[I]], Sequence[S]],
        dispatch: Callable[[S, T], None],
        max_batch: int = MAX_BATCH,
        guard: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        """``commit`` stores a batch in one transaction and returns what each item became, in order;
        ``dispatch`` is called once per stored item, in order, before its caller returns;
        ``guard``: entered around each batch's commit and dispatch."""
        self._commit = commit
        self._dispatch = dispatch
        self._guard = guard
        self._max_batch = max(1, max_batch)
        self._queue: deque[_Pending[I, S, T]] = deque()
        self._cond = threading.Condition()
        self._leading = False

    def submit(self, item: I, then: T) -> S:
        """Store ``item`` (with others queued at the same time), dispatch it with ``then``, return
        what it became. Durable when this returns. Raises what storing (or dispatching) raised."""
        pending: _Pending[I, S, T] = _Pending(item, then)
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
        assert pending.stored is not None
        return pending.stored

    def _run(self, batch: list[_Pending[I, S, T]]) -> None:
        """Store ``batch`` and dispatch each item; every pending ends ``done`` (stored, or with an error)."""
        try:
            try:
                stored = self._commit([p.item for p in batch])
            except BaseException as exc:
                for p in batch:
                    p.error = exc
                return
            for p, result in zip(batch, stored, strict=True):
                p.stored = result
                try:
                    self._dispatch(result, p.then)
                except BaseException as exc:  # stored (pending, answered after a restart), not dispatched
                    p.error = exc
        finally:
            for p in batch:
                p.done = True
