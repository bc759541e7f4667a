"""A worker process (:mod:`agentd.runtime.scaleout.workers` starts them): local actors answering the turns
the daemon sends over the pipe, their events sent back in batches."""

from __future__ import annotations

import gc
import os
import queue
import signal
import sys
import threading
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from agentd.app import App
from agentd.config import Config
from agentd.observe import tracing
from agentd.observe.log import get_logger
from agentd.runtime.actors.local import LocalActors
from agentd.runtime.events import Done, Error, Event, TokenDelta
from agentd.runtime.intake import Intake
from agentd.runtime.messages import Turn
from agentd.runtime.scaleout.pipe import BATCH, Answer, Answered, Ask, Events, Stop, Stopped, shard_of


def serve_worker(config: Config, index: int, count: int, conn: Connection, environ: dict[str, str]) -> None:
    """A worker process: answer the turns the daemon sends until it says stop (or is gone).

    ``environ`` is the daemon's environment when it started this worker, which the worker takes
    as its own: a forked worker would otherwise have its fork server's, as it was when the first
    worker started (what the configuration's ``${VAR}`` names, an MCP server's key say, is read here).

    The runtime is built on a thread of its own (opening the store may ask a remote
    embedding model its dimension, which may hang) while this loop already reads
    the pipe: turns wait for it in order, and a stop is obeyed at once.
    """
    # Ctrl-C, and a service manager's SIGTERM, may reach the whole process group: the daemon
    # stops its workers itself (agentd.runtime.scaleout.fork_server), and a worker whose daemon is gone
    # stops on its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update(environ)
    # What the fork server imported lives as long as the worker: out of the collector's passes,
    # which would otherwise also copy the pages the workers share.
    gc.freeze()
    # Before any thread starts: on Linux a thread's priority is its own, inherited by the
    # threads it starts (the runtime's, onnxruntime's).
    not_niced = _lower_priority(config.runtime.worker_niceness)
    from agentd.observe.log import configure

    configure(config.logging)
    tracing.configure(config.telemetry, config.where)  # the turns' spans join the daemon's traces
    worker = _Worker(config, index, count, conn)
    if not_niced:
        worker.log.warning("worker_niceness_not_set", niceness=config.runtime.worker_niceness, error=not_niced)
    grace = config.daemon.shutdown_grace_seconds
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                # The daemon is gone: stop as it would have asked. A turn finished here may race the
                # restarted daemon's answer to the same message: the reply writer keeps the first.
                worker.log.warning("worker_orphaned")
                break
            if isinstance(message, Answer):
                worker.answer(message)
            elif isinstance(message, Ask):
                threading.Thread(target=worker.reply, args=(message,), daemon=True).start()
            elif isinstance(message, Stop):
                grace = message.grace
                break
    finally:
        worker.stop(grace)
        conn.close()
        tracing.shutdown()  # before os._exit: the spans still queued are sent
        # As agentd serve does: no interpreter finalization, which a thread stuck in a dependency
        # (a hung embedder) could hold up forever.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _lower_priority(niceness: int) -> str | None:
    """Run below the daemon's process, so that its accepting and relaying come first when turns
    fill the cores; why not, if it could not."""
    if niceness > 0:
        try:
            os.nice(niceness)
        except (OSError, AttributeError) as exc:  # not permitted, or no nice() on this platform
            return f"{type(exc).__name__}: {exc}"
    return None


class _Worker:
    """A worker's runtime (built in the background), its outbox of events, and what it answers."""

    def __init__(self, config: Config, index: int, count: int, conn: Connection) -> None:
        self._config = config
        self._index = index
        self._count = count
        self._conn = conn
        self.log = get_logger("agentd.workers").bind(worker=index)
        self._send_lock = threading.Lock()
        self._outbox: queue.SimpleQueue[tuple[str, Event] | None] = queue.SimpleQueue()
        self._answering = _Answering()
        self._lock = threading.Lock()
        self._waiting: list[Answer] = []
        self._ready = threading.Event()
        self._app: App | None = None
        self._runtime: Intake | None = None
        self._stopped = False
        self._sender = threading.Thread(target=self._relay, name="agentd-worker-relay", daemon=True)
        self._sender.start()
        threading.Thread(target=self._start, name="agentd-worker-start", daemon=True).start()

    def answer(self, message: Answer) -> None:
        """Answer a turn now, or once the runtime is ready (in the order received)."""
        with self._lock:
            if self._runtime is None:
                if not self._stopped:
                    self._waiting.append(message)
                return
            self._dispatch(self._runtime, message)

    def reply(self, ask: Ask) -> None:
        """Answer the daemon's question (a worker still starting has no actors and is idle)."""
        self._ready.wait(ask.timeout)
        runtime = self._runtime
        value: Any = None
        if runtime is None:
            value = {"healthy": True, "actors": [], "starting": True} if ask.what == "health" else False
        elif ask.what == "health":
            value = runtime.health(ask.timeout)
        elif ask.what == "learning_idle":
            value = runtime.learning_idle(ask.timeout)
        self._send(Answered(ask.ident, value))

    def stop(self, grace: float) -> None:
        """Stop the runtime within ``grace`` (if it was built), send what is left, say so."""
        with self._lock:
            runtime, self._runtime, self._stopped = self._runtime, None, True
        if runtime is not None:
            runtime.stop(grace)
        self._outbox.put(None)
        self._sender.join(10)
        self._send(Stopped())
        if self._app is not None:
            self._app.close()

    def _start(self) -> None:
        try:
            app = App(self._config)
            app.store.share_writes()  # the daemon and the other workers write to the same database
            app.preload_models()
            runtime = Intake(
                app, LocalActors, owns=lambda channel: shard_of(channel, self._count) == self._index, passes_on=False
            )
        except Exception as exc:  # the daemon sees the worker exit and starts it again
            self.log.error("worker_start_failed", error=f"{type(exc).__name__}: {exc}")
            os._exit(1)
        with self._lock:
            if self._stopped:  # stopped while starting: nothing was answered here
                return
            self._app, self._runtime = app, runtime
            for message in self._waiting:
                self._dispatch(runtime, message)
            self._waiting.clear()
        self._ready.set()
        self.log.info("worker_ready", pid=os.getpid())
        # litellm takes seconds to import: meanwhile turns on the offline model are answered.
        app.preload_litellm()

    def _dispatch(self, runtime: Intake, message: Answer) -> None:
        if self._answering.begin(message.request_id):
            runtime.dispatch(_turn(message, self._outbox, self._answering))

    def _send(self, message: object) -> None:
        with self._send_lock:
            try:
                self._conn.send(message)
            except (OSError, EOFError, ValueError):
                pass  # the daemon is gone: the command loop sees it and stops

    def _relay(self) -> None:
        """Send the turns' events to the daemon, as many as are waiting in one message; a turn's
        text pieces that waited together go as one (the same text, in fewer events)."""
        outbox = self._outbox
        while True:
            item = outbox.get()
            if item is None:
                return
            items = [item]
            while len(items) < BATCH:
                try:
                    more = outbox.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._send(Events(items))
                    return
                last = items[-1]
                if last[0] == more[0] and isinstance(last[1], TokenDelta) and isinstance(more[1], TokenDelta):
                    items[-1] = (last[0], TokenDelta(text=last[1].text + more[1].text))
                else:
                    items.append(more)
            self._send(Events(items))


class _Answering:
    """The request ids a worker is answering, and the last :data:`REMEMBERED` it answered: after a
    worker restarts, the daemon may send a pending message again that the new worker already has."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: set[str] = set()
        self._done: deque[str] = deque()
        self._done_set: set[str] = set()

    def begin(self, request_id: str) -> bool:
        """True for a request id not seen yet (answer it), False for one seen already."""
        with self._lock:
            if request_id in self._active or request_id in self._done_set:
                return False
            self._active.add(request_id)
            return True

    def end(self, request_id: str) -> None:
        """The turn of ``request_id`` ended."""
        with self._lock:
            self._active.discard(request_id)
            self._done.append(request_id)
            self._done_set.add(request_id)
            if len(self._done) > REMEMBERED:
                self._done_set.discard(self._done.popleft())


#: Request ids a worker remembers having answered.
REMEMBERED = 10_000


def _turn(message: Answer, outbox: queue.SimpleQueue[tuple[str, Event] | None], answering: _Answering) -> Turn:
    request_id = message.request_id

    def sink(event: Event) -> None:
        outbox.put((request_id, event))
        if isinstance(event, Done | Error):
            answering.end(request_id)

    return Turn(
        request_id,
        message.persona,
        message.channel,
        message.user,
        message.message_id,
        message.text,
        sink,
        message.disable_memory,
        disable_tools=message.disable_tools,
        traceparent=message.traceparent,
        room=message.room,
    )
