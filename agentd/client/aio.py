"""The asyncio client: :class:`AsyncAgentdClient` (the same calls as :class:`~agentd.client.AgentdClient`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import httpx
from httpx_sse import aconnect_sse

from agentd.client import _calls
from agentd.client._feed import FeedState
from agentd.client.errors import ApiError, DaemonUnreachable, error_from
from agentd.client.models import Memory, Posted, StreamEvent
from agentd.client.retry import DEFAULT_PATIENCE, Patience
from agentd.client.sync import DEFAULT_URL, STREAM_READ_TIMEOUT, auth_headers

T = TypeVar("T")


class AsyncAgentdClient:
    """A running daemon's HTTP API, for asyncio. ``async with`` it, or ``await aclose()``.

    ``busy_patience``: as :class:`~agentd.client.AgentdClient`'s."""

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
        try:
            response = await self._http.request(call.method, call.path, params=call.params, json=call.json)
        except httpx.TransportError as exc:
            raise DaemonUnreachable(self.url, exc) from exc
        if response.status_code not in call.ok:
            raise error_from(response, response.content)
        return call.parse(response.json())

    async def health(self) -> dict[str, Any]:
        """``GET /healthz``."""
        return await self._call(_calls.health())

    async def personas(self) -> list[dict[str, Any]]:
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
    ) -> Posted:
        """Post a message to a channel.

        ``visibility``: ``direct`` (only this user and the persona read the channel) or
        ``shared``; the channel's first post that says so decides. A ``429`` (nothing stored)
        or a refused connection is retried for up to ``busy_patience`` seconds.
        """
        call = _calls.post(channel, user, text, persona, disable_memory, visibility)
        patience = Patience(self.busy_patience)
        while True:
            try:
                return await self._call(call)
            except (ApiError, DaemonUnreachable) as exc:
                wait = patience.wait_after(exc)
                if wait is None:
                    raise
                await asyncio.sleep(wait)

    async def messages(self, channel: str, after: int = 0, limit: int = 100) -> list[dict[str, Any]]:
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
    ) -> tuple[Memory, bool]:
        """Store a memory; True if it was new."""
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
    ) -> list[Memory]:
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
    ) -> dict[str, Any]:
        """The ``## Known Facts`` block for ``query``."""
        return await self._call(_calls.context(user, query, token_budget, limit, persona, channel))

    async def list_memories(
        self, persona: str, *, scope: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[Memory]:
        """A persona's memories, newest first."""
        return await self._call(_calls.list_memories(persona, scope, limit, offset))

    async def forget_memory(self, memory_id: int) -> Memory:
        """Delete a memory."""
        return await self._call(_calls.forget(memory_id))

    async def budget(
        self, persona: str, channel: str, *, user: str | None = None, message: str | None = None
    ) -> dict[str, Any]:
        """Where the tokens of the persona's next prompt would go."""
        return await self._call(_calls.budget(persona, channel, user, message))

    async def chat(
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
        timeout = httpx.Timeout(self._timeout, read=STREAM_READ_TIMEOUT)
        try:
            async with aconnect_sse(self._http, "POST", "/v1/chat", json=body, timeout=timeout) as source:
                if source.response.status_code != 200:
                    raise error_from(source.response, await source.response.aread())
                async for sse in source.aiter_sse():
                    event = _calls.to_event(sse)
                    if event is not None:
                        yield event
        except httpx.TransportError as exc:
            raise DaemonUnreachable(self.url, exc) from exc

    def follow(self, channel: str, *, last_event_id: str | None = None, reconnect: bool = True) -> AsyncFeed:
        """Follow a channel's feed, resuming with ``Last-Event-ID`` (see :meth:`AgentdClient.follow`)."""
        return AsyncFeed(self, channel, last_event_id, reconnect)


class AsyncFeed(FeedState):
    """An async-iterable channel feed that resumes where it left off (``last_event_id``)."""

    def __init__(self, client: AsyncAgentdClient, channel: str, last_event_id: str | None, reconnect: bool) -> None:
        super().__init__(channel, last_event_id, reconnect)
        self._client = client
        self._closed = asyncio.Event()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stop: at once when called between two events (in the loop's body), else at the next event or wait."""
        self._closed.set()

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        client = self._client
        path = _calls.channel_path(self.channel, "events")
        timeout = httpx.Timeout(client._timeout, read=STREAM_READ_TIMEOUT)
        while not self._closed.is_set():
            headers = self.connecting()
            try:
                async with aconnect_sse(client._http, "GET", path, headers=headers, timeout=timeout) as source:
                    if source.response.status_code != 200:
                        self.refused(error_from(source.response, await source.response.aread()))
                    else:
                        async for sse in source.aiter_sse():
                            opened, event = self.received(sse)
                            for item in (opened, event):
                                if item is not None:
                                    yield item
                                if self._closed.is_set():  # closed while the event was handled
                                    return
            except httpx.TransportError as exc:
                self.dropped(client.url, exc)
            wait = self.again()
            if wait is None:
                return
            try:
                await asyncio.wait_for(self._closed.wait(), wait)
            except TimeoutError:
                pass
