"""What the routes share: the App's parts, the runtime and the channel hub."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from anyio import CapacityLimiter, to_thread
from fastapi import Request

from agentd._exceptions import InvalidInput
from agentd.access.scopes import check_identifier
from agentd.api.addressing import addressed_to
from agentd.api.feed import ChannelHub
from agentd.api.keys import KeyBook
from agentd.app import App
from agentd.embedders.guard import waiting_since
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
        """:meth:`persona_for`, except in a room (``[channels.NAME]`` binding several personas) when
        the request names no persona: ``None``, the room decides who answers (the runtime's intake,
        :mod:`agentd.runtime.rooms`)."""
        entry = self.app.config.channels.get(channel)
        if named is None and entry is not None and len(entry.personas) > 1:
            check_identifier("channel", channel)
            return None
        return self.persona_for(channel, named, text)

    def persona_for(self, channel: str, named: str | None, text: str | None = None) -> str:
        """The persona that answers in ``channel``.

        1. ``named`` (the request's ``persona`` field), if given: it must be allowed here.
        2. The persona the message ``text`` addresses (``NAME: ...``, ``NAME, ...``,
           ``@NAME``; :mod:`agentd.api.addressing`) among those allowed here.
        3. The channel's default.

        Allowed here: a channel bound in config (``[channels.NAME] personas = [...]``)
        is answered only by those personas, and its default is the first; any other
        channel may be answered by any persona, and its default is the single
        persona whose ``channels`` globs match it (several matching: name one).
        """
        check_identifier("channel", channel)
        personas = self.app.personas
        entry = self.app.config.channels.get(channel)
        bound = list(entry.personas) if entry is not None else []
        if named is not None:
            persona = personas[named].name  # NotFound names the known ones
            if bound and persona not in bound:
                raise InvalidInput(
                    "persona", f"{persona!r} is not bound to channel {channel!r} (bound: {', '.join(bound)})"
                )
            return persona
        addressed = addressed_to(text, bound or list(personas))
        if addressed is not None:
            return addressed
        if bound:
            return bound[0]
        matching = [p.name for p in personas.bound_to(channel)]
        if len(matching) == 1:
            return matching[0]
        if not matching:
            raise InvalidInput(
                "persona",
                f"channel {channel!r} is bound to no persona: name one, or bind it with "
                f"[channels.{channel}] personas = [...] in agentd.toml",
            )
        raise InvalidInput(
            "persona",
            f"channel {channel!r} matches several personas ({', '.join(matching)}): name one, "
            "or address one in the message (NAME: ... or @NAME)",
        )


async def daemon(request: Request) -> Daemon:
    """FastAPI dependency: the daemon serving this request (``async``: FastAPI runs a plain
    function dependency on a worker thread, a hop that costs more than the lookup)."""
    return request.app.state.daemon  # type: ignore[no-any-return]
