"""The asyncio client: :class:`AsyncAgentdClient` (the same calls as :class:`~agentd.client.AgentdClient`,
the same programs of :mod:`agentd.client._program`, carried out with asyncio)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse

from agentd.client import _calls
from agentd.client._feed import FeedState, following
from agentd.client._program import (
    Emit,
    Next,
    Open,
    Program,
    Reply,
    Send,
    Step,
    Wait,
    calling,
    chatting,
    posting,
    unreachable,
)
from agentd.client.models import StreamEvent
from agentd.client.retry import DEFAULT_PATIENCE, Patience
from agentd.client.sync import DEFAULT_URL, STREAM_READ_TIMEOUT, auth_headers
from agentd.schemas.responses import (
    BudgetResponse,
    Health,
    KnownFactsResponse,
    MemoryHitOut,
    MemoryOut,
    MessageOut,
    PersonaOut,
    PostAccepted,
)

T = TypeVar("T")


async def _no_frames() -> AsyncIterator[ServerSentEvent]:
    return
    yield  # an async generator that yields nothing


class _AsyncSteps:
    """Carries out one program's steps with asyncio: at most one stream open at a time,
    closed at the next :class:`Open` or :class:`Wait` and when the program ends."""

    def __init__(self, client: AsyncAgentdClient, closed: asyncio.Event | None = None) -> None:
        self._client = client
        self._closed = closed
        self.streams = AsyncExitStack()
        self._frames: AsyncIterator[ServerSentEvent] = _no_frames()

    async def do(self, step: Step) -> Reply:
        """The step's reply; a connection that failed is answered, not raised."""
        try:
            return await self._do(step)
        except httpx.TransportError as exc:
            return unreachable(self._client.url, exc)

    async def _do(self, step: Step) -> Reply:
        http = self._client._http
        if isinstance(step, Send):
            call = step.call
            return await http.request(call.method, call.path, params=call.params, json=call.json)
        if isinstance(step, Next):
            return await anext(self._frames, None)
        await self.streams.aclose()
        if isinstance(step, Open):
            timeout = httpx.Timeout(self._client._timeout, read=STREAM_READ_TIMEOUT)
            opening = aconnect_sse(http, step.method, step.path, headers=step.headers, json=step.json, timeout=timeout)
            source = await self.streams.enter_async_context(opening)
            if source.response.status_code != 200:
                await source.response.aread()
            frames = source.aiter_sse()
            self.streams.push_async_callback(frames.aclose)
            self._frames = frames
            return source.response
        if isinstance(step, Wait):
            if self._closed is None:
                await asyncio.sleep(step.seconds)
            else:
                try:
                    await asyncio.wait_for(self._closed.wait(), step.seconds)
                except TimeoutError:
                    pass
        return None

    async def run(self, program: Program[T]) -> T:
        """Run a program to its result."""
        async with self.streams:
            reply: Reply = None
            while True:
                try:
                    step = program.send(reply)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
                reply = await self.do(step)

    async def stream(self, program: Program[None]) -> AsyncIterator[StreamEvent]:
        """Run a program, yielding the events it emits."""
        async with self.streams:
            reply: Reply = None
            while True:
                try:
                    step = program.send(reply)
                except StopIteration:
                    return
                if isinstance(step, Emit):
                    yield step.event
                    reply = None
                else:
                    reply = await self.do(step)


class AsyncAgentdClient:
    """A running daemon's HTTP API, for asyncio. ``async with`` it, or ``await aclose()``.

    Answers, errors and ``busy_patience``: as :class:`~agentd.client.AgentdClient`'s."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        busy_patience: float = DEFAULT_PATIENCE,
    ) -> None:
        self.url = url.rstrip("/")
        self.busy_patience = busy_patience
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=auth_headers(api_key), timeout=httpx.Timeout(timeout), transport=transport
        )
        self._timeout = timeout

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncAgentdClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def _call(self, call: _calls.Call[T]) -> T:
        return await _AsyncSteps(self).run(calling(call))

    async def health(self) -> Health:
        """``GET /healthz``."""
        return await self._call(_calls.health())

    async def personas(self) -> list[PersonaOut]:
        """Every persona."""
        return await self._call(_calls.personas())

    async def bindings(self) -> dict[str, list[str]]:
        """The personas each configured channel is bound to (``[channels.NAME] personas``; several: a room)."""
        return await self._call(_calls.bindings())

    async def post(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        persona: str | None = None,
        disable_memory: bool = False,
        visibility: str | None = None,
    ) -> PostAccepted:
        """Post a message to a channel.

        ``visibility``: ``direct`` (only this user and the persona read the channel) or
        ``shared``; the channel's first post that says so decides. A ``429`` (nothing stored)
        or a refused connection is retried for up to ``busy_patience`` seconds.
        """
        call = _calls.post(channel, user, text, persona, disable_memory, visibility)
        return await _AsyncSteps(self).run(posting(call, Patience(self.busy_patience)))

    async def messages(self, channel: str, after: int = 0, limit: int = 100) -> list[MessageOut]:
        """A channel's stored messages after id ``after``."""
        return await self._call(_calls.messages(channel, after, limit))

    async def add_memory(
        self,
        persona: str,
        text: str,
        *,
        category: str = "fact",
        scope: str | None = None,
        user: str | None = None,
        channel: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[MemoryOut, bool]:
        """Store a memory: the memory, and whether it was new (False: an identical one was stored already)."""
        return await self._call(_calls.add_memory(persona, text, category, scope, user, channel, metadata))

    async def search_memories(
        self,
        query: str,
        *,
        persona: str | None = None,
        user: str | None = None,
        channel: str | None = None,
        limit: int | None = None,
        min_score: float | None = None,
    ) -> list[MemoryHitOut]:
        """Memories ranked by relevance to ``query``."""
        return await self._call(_calls.search(query, persona, user, channel, limit, min_score))

    async def memory_context(
        self,
        user: str,
        query: str,
        *,
        token_budget: int | None = None,
        limit: int | None = None,
        persona: str | None = None,
        channel: str | None = None,
    ) -> KnownFactsResponse:
        """The ``## Known Facts`` block for ``query``."""
        return await self._call(_calls.context(user, query, token_budget, limit, persona, channel))

    async def list_memories(
        self, persona: str, *, scope: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[MemoryOut]:
        """A persona's memories, newest first."""
        return await self._call(_calls.list_memories(persona, scope, limit, offset))

    async def forget_memory(self, memory_id: int) -> MemoryOut:
        """Delete a memory; returns what was deleted."""
        return await self._call(_calls.forget(memory_id))

    async def budget(
        self, persona: str, channel: str, *, user: str | None = None, message: str | None = None
    ) -> BudgetResponse:
        """Where the tokens of the persona's next prompt would go."""
        return await self._call(_calls.budget(persona, channel, user, message))

    def chat(
        self,
        persona: str,
        channel: str,
        user: str,
        message: str,
        *,
        disable_memory: bool = False,
        visibility: str | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Send a message and yield the turn's events until ``done`` or ``error``."""
        body = _calls.chat_body(persona, channel, user, message, disable_memory, visibility)
        return _AsyncSteps(self).stream(chatting(body))

    def follow(self, channel: str, *, last_event_id: str | None = None, reconnect: bool = True) -> AsyncFeed:
        """Follow a channel's feed, resuming with ``Last-Event-ID`` (see :meth:`AgentdClient.follow`)."""
        return AsyncFeed(self, channel, last_event_id, reconnect)


class AsyncFeed(FeedState):
    """An async-iterable channel feed that resumes where it left off (``last_event_id``)."""

    def __init__(self, client: AsyncAgentdClient, channel: str, last_event_id: str | None, reconnect: bool) -> None:
        self._closing = asyncio.Event()
        super().__init__(channel, last_event_id, reconnect, self._closing)
        self._client = client

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return _AsyncSteps(self._client, self._closing).stream(following(self))
