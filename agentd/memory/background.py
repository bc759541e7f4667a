"""Background jobs over channels' exchanges: episodic indexing and fact extraction.

A :class:`JobWorker` is one daemon thread working through channels for one job.
It is nudged with a channel after each reply is stored (the runtime's listener
on ``done``, so a reply is never delayed), and on start it catches up with every
channel whose newest user message is past the job's cursor (work left when the
daemon stopped or crashed). Each channel is worked on by one thread only; the
job itself (:class:`~agentd.memory.episodes.Episodes`,
:class:`~agentd.memory.extract.Extractor`) reads and moves the cursor. Every call
the job makes is bounded (the embedder through its guard, the model by
``[models] llm_timeout_seconds``); a failure is logged and the channel is tried
again after a backoff, without holding up the other channels.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agentd.observe.log import get_logger
from agentd.store import Store
from agentd.timing.backoff import delay

log = get_logger("agentd.background")

#: First wait before a failed channel is tried again; doubled per failure, up to MAX_BACKOFF.
BACKOFF = 1.0
MAX_BACKOFF = 60.0


class JobWorker:
    """One thread running ``work(channel, should_stop)`` for channels as they are nudged."""

    def __init__(
        self,
        job: str,
        store: Store,
        work: Callable[[str, Callable[[], bool]], int],
        owns: Callable[[str], bool] | None = None,
    ) -> None:
        """``owns``: the channels it catches up with at start (default: every channel behind)."""
        self._job = job
        self._store = store
        self._work = work
        self._owns = owns
        self._pending: dict[str, float] = {}  # channel -> not before (monotonic)
        self._failures: dict[str, int] = {}
        self._busy = False
        self._stopping = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"agentd-{job}", daemon=True)

    @property
    def stop_event(self) -> threading.Event:
        """Set when the worker is stopping (jobs stop between calls)."""
        return self._stopping

    def start(self) -> JobWorker:
        """Start the thread; it first catches up with every channel behind its cursor."""
        with self._changed:
            self._busy = True  # until the catch-up has queued what is left from before
        self._thread.start()
        return self

    def nudge(self, channel: str) -> None:
        """Work on ``channel`` soon (a reply was stored there)."""
        with self._changed:
            self._pending.setdefault(channel, 0.0)
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is queued or running (failed channels waiting to retry count as queued)."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._busy, timeout=timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the current call; a job stopped midway writes nothing and is resumed at the next start."""
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            with self._store.read() as conn:
                behind = self._store.cursors.behind(conn, self._job)
        except Exception as exc:  # the store may be failing at start; nudges still come
            log.warning("background_catch_up_failed", job=self._job, error=repr(exc))
            behind = []
        for name in behind:
            if self._owns is None or self._owns(name):
                self.nudge(name)
        with self._changed:
            self._busy = False
            self._changed.notify_all()
        while not self._stopping.is_set():
            channel = self._next()
            if channel is None:
                continue
            try:
                count = self._work(channel, self._stopping.is_set)
            except Exception as exc:  # logged and retried later: a background job never ends the daemon
                if self._stopping.is_set():
                    break  # resumed at the next start
                failures = self._failures.get(channel, 0) + 1
                self._failures[channel] = failures
                wait = delay(failures - 1, BACKOFF, MAX_BACKOFF, jitter=0.0)
                log.warning("background_job_failed", job=self._job, channel=channel, error=repr(exc), retry_s=wait)
                with self._changed:
                    self._pending.setdefault(channel, time.monotonic() + wait)
            else:
                self._failures.pop(channel, None)
                if count:
                    log.debug("background_job_done", job=self._job, channel=channel, count=count)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()

    def _next(self) -> str | None:
        """The next channel due, or None after a wait (stop or nudge)."""
        with self._changed:
            now = time.monotonic()
            due = [c for c, t in self._pending.items() if t <= now]
            if due:
                channel = min(due, key=lambda c: self._pending[c])
                del self._pending[channel]
                self._busy = True
                return channel
            waits = [t - now for t in self._pending.values()]
            self._changed.wait(timeout=min(waits) if waits else None)
            return None
