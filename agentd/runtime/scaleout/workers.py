"""Turns answered in worker processes, so that the daemon's Python runs on every core.

Python runs one thread of a process at a time (the GIL). A turn spends about two
thirds of its CPU in Python (the rest in the embedding model, SQLite and
tiktoken, which release it), so one process answering every channel keeps
about one core busy and leaves the others mostly idle, while its HTTP requests
wait for the GIL behind the turns (docs/notes/throughput.md has the figures).

With ``[runtime] workers = N`` (``agentd serve`` only), the daemon's process
keeps the HTTP API and accepting messages: each message is stored (durable
before its ``202``, as always) and then handed to the worker that owns its
channel: ``crc32(root channel) % N``, so a channel (and a delegation's child
channel with it) is always answered by the same worker, in order. A worker is
a process (:mod:`agentd.runtime.scaleout.worker`) running local actors over
its own :class:`~agentd.app.App` (its own store connections and embedding
model); it answers the turns it is given and indexes the episodes of its own
channels. Each turn's events come back over the worker's pipe, in order and a
batch at a time, and the daemon hands them to the turn's sink and listeners as
if the turn had run in its own process.

A worker that dies (a bug, ``kill -9``) is started again; the messages of its
channels still pending in the store are answered by the new one (nothing
accepted is lost), and a turn whose reply was stored but whose ``done`` never
came back ends with an error event. A worker that keeps dying soon after it
starts (it cannot open the store or load its model, say) is started again after
growing pauses (:data:`RESTART_PAUSES`) rather than at once, over and over; one
that cannot be started at all (no process could be made) is tried again the same
way. Its channels' turns wait meanwhile: they are stored, and nothing is lost.

When the daemon stops, each worker stops its runtime with the daemon's grace
period (replies in flight finish or are stored as ``interrupted``; messages not
started stay pending) and exits. A worker whose daemon is gone (its pipe
closes) stops the same way.

Workers are forked from a fork server (``multiprocessing``'s ``forkserver``, where the
platform has one; else each is a new interpreter): a clean process that imports
once what a worker needs (:meth:`agentd.app.App.turn_modules`: agentd, the
embedding runtime, litellm when a persona uses it) before it forks the first one.
A second worker, or one started again after it died, then starts with all of it
loaded (and shares those pages with its siblings until it writes to them) instead
of importing it again: seconds of CPU each. A worker takes the daemon's environment as it is when
the worker starts, not the fork server's (as it was when the first worker started).
``agentd serve`` starts the fork server first thing (:func:`start_fork_server`), so its imports
run while the daemon starts; the daemon starts the workers on a thread of its own, so it listens
meanwhile; turns queue until their worker is there.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection
from typing import Any

from agentd.config import Config
from agentd.observe import tracing
from agentd.observe.log import get_logger
from agentd.runtime.events import Event
from agentd.runtime.messages import Turn
from agentd.runtime.scaleout import worker
from agentd.runtime.scaleout.pipe import ASK_TIMEOUT, Answer, Answered, Ask, Events, Stop, Stopped, shard_of

log = get_logger("agentd.workers")

#: Seconds a worker gets to stop beyond the grace period before it is killed.
STOP_MARGIN = 15.0
#: A worker that dies within this many seconds of its start died young: each further young death
#: in a row waits longer before the next start.
YOUNG = 10.0
#: Seconds to wait before starting a worker again: after its second young death in a row (the
#: first is started again at once), the third, and so on; the last pause repeats. Also the pauses
#: between attempts to start one that could not be started.
RESTART_PAUSES = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)


def restart_pause(n: int) -> float:
    """The ``n``-th pause (from 1) of :data:`RESTART_PAUSES`; the last repeats."""
    return RESTART_PAUSES[min(n, len(RESTART_PAUSES)) - 1]


# -- the daemon's side --------------------------------------------------------------------------

#: Called with each event a worker sends back: ``(request_id, event)``.
Deliver = Callable[[str, Event], None]
#: Called once a worker was started again after it died: ``(its index)``.
Restarted = Callable[[int], None]


class Workers:
    """The daemon's worker processes: routes turns to them and relays their events back."""

    def __init__(
        self, config: Config, count: int, deliver: Deliver, restarted: Restarted, preload: Sequence[str] = ()
    ) -> None:
        """``preload``: the modules the fork server imports once for every worker."""
        self._config = config
        self._deliver = deliver
        self._restarted = restarted
        self._context: Any = _context(preload)
        self._stopping = threading.Event()
        self._asks = itertools.count(1)
        self._shards = [_Shard(self, i) for i in range(count)]
        self._starter: threading.Thread | None = None

    @property
    def count(self) -> int:
        """How many workers there are."""
        return len(self._shards)

    def start(self) -> Workers:
        """Start every worker, on a thread (the fork server imports what they need first, and
        they load their models meanwhile): turns queue until their worker is ready."""
        self._starter = threading.Thread(target=self._start_all, name="agentd-workers-start", daemon=True)
        self._starter.start()
        return self

    def _start_all(self) -> None:
        for shard in self._shards:
            if not shard.start_until_running():
                return  # the daemon stops

    def owner(self, channel: str) -> int:
        """The index of the worker that answers ``channel``."""
        return shard_of(channel, len(self._shards))

    def route(self, turn: Turn) -> None:
        """Have the worker that owns the turn's channel answer it (its message is stored)."""
        index = self.owner(turn.channel)
        with tracing.span("route to worker", {"agentd.worker": index}, parent=turn.traceparent):
            traceparent = tracing.inject()  # the trace crosses the pipe with the turn
        self._shards[index].send(
            Answer(
                turn.request_id,
                turn.persona,
                turn.channel,
                turn.user,
                turn.message_id,
                turn.text,
                turn.disable_memory,
                turn.disable_tools,
                traceparent,
                turn.room,
            )
        )

    def ask(self, what: str, timeout: float = ASK_TIMEOUT) -> list[Any]:
        """Every worker's answer to ``what`` (``None`` for a worker that did not answer in time)."""
        futures = [shard.ask(what, timeout) for shard in self._shards]
        answers: list[Any] = []
        for future in futures:
            try:
                answers.append(future.result(timeout + 1.0))
            except FutureTimeout:
                answers.append(None)
        return answers

    def pids(self) -> list[int | None]:
        """The workers' process ids (``None`` for one not running)."""
        return [shard.pid for shard in self._shards]

    def stop(self, grace: float) -> None:
        """Stop every worker within ``grace`` seconds (plus a margin), killing one that does not."""
        self._stopping.set()
        if self._starter is not None:
            self._starter.join(grace + STOP_MARGIN)  # a worker being started is stopped with the rest
        for shard in self._shards:
            shard.send(Stop(grace))
        for shard in self._shards:
            shard.join(grace + STOP_MARGIN)

    # -- for the shards ---------------------------------------------------------------------

    def _next_ask(self) -> int:
        return next(self._asks)


def _context(preload: Sequence[str]) -> Any:
    """The ``multiprocessing`` context workers start from: the fork server, importing ``preload``
    (and this module) once; where the platform has none, ``spawn``."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["agentd.runtime.scaleout.fork_server", __name__, worker.__name__, *preload])
    return context


def start_fork_server(preload: Sequence[str]) -> None:
    """Start the workers' fork server now, importing ``preload`` (as :class:`Workers` will ask):
    ``agentd serve`` calls it first thing, so that the fork server's imports (seconds of CPU with
    litellm) run while the daemon itself starts, on another core, rather than after it listens.
    Where the platform has no fork server, nothing happens."""
    if _context(preload).get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


class _Shard:
    """One worker process, its pipe, and the two threads that feed and drain it."""

    def __init__(self, owner: Workers, index: int) -> None:
        self._owner = owner
        self.index = index
        self._lock = threading.Lock()
        self._outbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._asked: dict[int, Future[Any]] = {}
        self._process: Any = None
        self._generation = 0
        self._started_at = 0.0
        #: Deaths in a row within :data:`YOUNG` seconds of the start.
        self._young_deaths = 0

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.is_alive() else None

    def start(self) -> None:
        """Start the process, and its sender and relay threads."""
        context = self._owner._context
        here, there = context.Pipe(duplex=True)
        process = context.Process(
            target=worker.serve_worker,
            args=(self._owner._config, self.index, self._owner.count, there, dict(os.environ)),
            name=f"agentd-worker-{self.index}",
            daemon=True,
        )
        try:
            process.start()
        except BaseException:
            here.close()
            raise
        finally:
            there.close()
        self._started_at = time.monotonic()
        with self._lock:
            self._generation += 1
            generation = self._generation
            self._process = process
            if generation > 1:  # the first keeps what was queued before it started; a restart's
                self._outbox = queue.SimpleQueue()  # pending turns are routed to it again
            outbox = self._outbox
        threading.Thread(
            target=self._send_loop, args=(here, outbox), name=f"agentd-worker-{self.index}-send", daemon=True
        ).start()
        threading.Thread(
            target=self._relay_loop,
            args=(here, process, generation),
            name=f"agentd-worker-{self.index}-relay",
            daemon=True,
        ).start()
        log.info("worker_started", worker=self.index, pid=process.pid)

    def start_until_running(self) -> bool:
        """:meth:`start`, tried again after each of :data:`RESTART_PAUSES` while the process cannot
        be made (its channels' turns wait meanwhile); False if the daemon stops first."""
        stopping = self._owner._stopping
        attempt = 0
        while not stopping.is_set():
            attempt += 1
            try:
                self.start()
                return True
            except Exception as exc:
                pause = restart_pause(attempt)
                log.error(
                    "worker_start_failed",
                    worker=self.index,
                    attempt=attempt,
                    retry_in_seconds=pause,
                    error=f"{type(exc).__name__}: {exc}",
                )
                stopping.wait(pause)
        return False

    def send(self, message: object) -> None:
        """Queue ``message`` for the worker (sent in order by the sender thread; never blocks)."""
        with self._lock:
            outbox = self._outbox
        outbox.put(message)

    def ask(self, what: str, timeout: float) -> Future[Any]:
        """Ask the worker ``what``; the future gets its answer."""
        future: Future[Any] = Future()
        ident = self._owner._next_ask()
        with self._lock:
            self._asked[ident] = future
        self.send(Ask(ident, what, timeout))
        return future

    def join(self, timeout: float) -> None:
        """Wait for the process to exit; kill it when it does not in time."""
        process = self._process
        if process is None:
            return
        process.join(timeout)
        if process.is_alive():
            log.error("worker_stop_timeout", worker=self.index, pid=process.pid)
            process.kill()
            process.join(5)

    def _send_loop(self, conn: Connection, outbox: queue.SimpleQueue[object]) -> None:
        while True:
            message = outbox.get()
            if message is None:
                return
            try:
                conn.send(message)
            except (OSError, EOFError, ValueError):
                return  # the worker is gone: the relay loop restarts it, and pending messages are re-sent
            if isinstance(message, Stop):
                return

    def _relay_loop(self, conn: Connection, process: Any, generation: int) -> None:
        deliver = self._owner._deliver
        try:
            while True:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    break
                if isinstance(message, Events):
                    for request_id, event in message.items:
                        deliver(request_id, event)
                elif isinstance(message, Answered):
                    with self._lock:
                        future = self._asked.pop(message.ident, None)
                    if future is not None and not future.done():
                        future.set_result(message.value)
                elif isinstance(message, Stopped):
                    break
        finally:
            conn.close()
            with self._lock:
                outbox = self._outbox
                asked, self._asked = self._asked, {}
            outbox.put(None)  # ends this generation's sender
            for future in asked.values():
                if not future.done():
                    future.set_result(None)
        stopping = self._owner._stopping
        if stopping.is_set():
            return
        process.join(5)
        log.error("worker_died", worker=self.index, pid=process.pid, exitcode=process.exitcode)
        with self._lock:
            if generation != self._generation:
                return
        young = time.monotonic() - self._started_at < YOUNG
        self._young_deaths = self._young_deaths + 1 if young else 0
        if self._young_deaths > 1:
            pause = restart_pause(self._young_deaths - 1)
            log.warning("worker_restart_paused", worker=self.index, young_deaths=self._young_deaths, seconds=pause)
            if stopping.wait(pause):
                return
        if self.start_until_running():
            self._owner._restarted(self.index)


__all__ = ["RESTART_PAUSES", "Workers", "restart_pause", "shard_of", "start_fork_server"]
