"""What the routes share: the App's parts, the runtime and the channel hub."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from anyio import CapacityLimiter, to_thread
from fastapi import Request

from agentd.api.feed import ChannelHub
from agentd.api.keys import KeyBook
from agentd.app import App
from agentd.embedders.guard import waiting_since
from agentd.ops.chat import answering, persona_for
from agentd.runtime import Runtime

T = TypeVar("T")

#: Threads for requests that may wait on the embedding model (memory search, add, import,
#: budget previews). Each such wait is bounded, but while a model hangs they all wait
#: their full timeout: they get threads of their own, so the rest of the API (health,
#: chat, channels) never queues behind them.
EMBEDDING_THREADS = 16
#: Threads for ``/healthz``'s question to the supervisor.
PROBE_THREADS = 4


@dataclass(frozen=True)
class Pools:
    """Thread limits of the blocking work the routes hand off (per daemon: one event loop each)."""

    embedding: CapacityLimiter = field(default_factory=lambda: CapacityLimiter(EMBEDDING_THREADS))
    probe: CapacityLimiter = field(default_factory=lambda: CapacityLimiter(PROBE_THREADS))


@dataclass(frozen=True)
class Daemon:
    """The running daemon's parts, handed to every route."""

    app: App
    runtime: Runtime
    hub: ChannelHub
    pools: Pools = field(default_factory=Pools)
    #: The keys callers may send (the config's admin key and the stored ones).
    keys: KeyBook = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", KeyBook(self.app.store, self.app.config.daemon.api_key))

    async def embedding_work(self, work: Callable[[], T]) -> T:
        """Run blocking work that may wait on the embedder, on its own threads. Its first embedder
        call's timeout counts from now: time spent queued for a thread behind calls to a hung
        model is part of it (:func:`agentd.embedders.guard.waiting_since`)."""
        started = time.monotonic()

        def timed() -> T:
            with waiting_since(started):
                return work()

        return await to_thread.run_sync(timed, limiter=self.pools.embedding)

    async def probe(self, work: Callable[[], T]) -> T:
        """Run a health probe on its own threads."""
        return await to_thread.run_sync(work, limiter=self.pools.probe)

    def answering(self, channel: str, named: str | None, text: str | None = None) -> str | None:
        """Who answers ``text`` in ``channel`` (``None``: the room decides): :func:`agentd.ops.chat.answering`."""
        return answering(self.app, channel, named, text)

    def persona_for(self, channel: str, named: str | None, text: str | None = None) -> str:
        """The persona that answers in ``channel``: :func:`agentd.ops.chat.persona_for`."""
        return persona_for(self.app, channel, named, text)


async def daemon(request: Request) -> Daemon:
    """FastAPI dependency: the daemon serving this request (``async``: FastAPI runs a plain
    function dependency on a worker thread, a hop that costs more than the lookup)."""
    return request.app.state.daemon  # type: ignore[no-any-return]
