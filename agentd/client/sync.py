"""The blocking client: :class:`AgentdClient`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, TypeVar

import httpx
from httpx_sse import connect_sse

from agentd.client import _calls
from agentd.client._feed import FeedState
from agentd.client.errors import ApiError, DaemonUnreachable, error_from
from agentd.client.models import Memory, Posted, StreamEvent
from agentd.client.retry import DEFAULT_PATIENCE, Patience

T = TypeVar("T")

#: Default base URL (``agentd serve``'s default bind).
DEFAULT_URL = "http://127.0.0.1:8765"
#: A stream with no byte for this long is dead (the daemon sends a keep-alive every 15 s).
STREAM_READ_TIMEOUT = 60.0


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer KEY`` when a key is given."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class AgentdClient:
    """A running daemon's HTTP API, blocking. Use as a context manager, or ``close()``.

    Errors the daemon answers raise :class:`ApiError` (status, code, field,
    message); not reaching it raises :class:`DaemonUnreachable`. ``busy_patience``: how many
    seconds :meth:`post` keeps posting again while the daemon answers ``429`` (after its
    ``Retry-After``) or refuses the connection (0: never).
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        busy_patience: float = DEFAULT_PATIENCE,
    ) -> None:
        self.url = url.rstrip("/")
        self.busy_patience = busy_patience
        self._http = httpx.Client(
            base_url=self.url, headers=auth_headers(api_key), timeout=httpx.Timeout(timeout), transport=transport
        )
        self._timeout = timeout

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> AgentdClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- plain calls ---------------------------------------------------------------------

    def _call(self, call: _calls.Call[T]) -> T:
        try:
            response = self._http.request(call.method, call.path, params=call.params, json=call.json)
        except httpx.TransportError as exc:
            raise DaemonUnreachable(self.url, exc) from exc
        if response.status_code not in call.ok:
            raise error_from(response, response.content)
        return call.parse(response.json())

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: status, version, actors."""
        return self._call(_calls.health())

    def personas(self) -> list[dict[str, Any]]:
        """Every persona with its model, window and channels."""
        return self._call(_calls.personas())

    def post(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        persona: str | None = None,
        disable_memory: bool = False,
        visibility: str | None = None,
    ) -> Posted:
        """Post a message to a channel (stored at once; the reply arrives on :meth:`follow`).

        ``visibility``: ``direct`` (only this user and the persona read the channel) or
        ``shared``; the channel's first post that says so decides. A ``429`` (nothing stored)
        or a refused connection is retried for up to ``busy_patience`` seconds; nothing that
        may have been stored is.
        """
        call = _calls.post(channel, user, text, persona, disable_memory, visibility)
        patience = Patience(self.busy_patience)
        while True:
            try:
                return self._call(call)
            except (ApiError, DaemonUnreachable) as exc:
                wait = patience.wait_after(exc)
                if wait is None:
                    raise
                time.sleep(wait)

    def messages(self, channel: str, after: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        """A channel's stored messages after id ``after``, oldest first."""
        return self._call(_calls.messages(channel, after, limit))

    def add_memory(
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
        """Store a memory (global unless ``scope``, ``user`` or ``channel``); True if it was new."""
        return self._call(_calls.add_memory(persona, text, category, scope, user, channel, metadata))

    def search_memories(
        self,
        query: str,
        *,
        persona: str | None = None,
        user: str | None = None,
        channel: str | None = None,
        limit: int | None = None,
        min_score: float | None = None,
    ) -> list[Memory]:
        """Memories ranked by relevance to ``query`` (``user``'s and ``channel``'s included)."""
        return self._call(_calls.search(query, persona, user, channel, limit, min_score))

    def memory_context(
        self,
        user: str,
        query: str,
        *,
        token_budget: int | None = None,
        limit: int | None = None,
        persona: str | None = None,
        channel: str | None = None,
    ) -> dict[str, Any]:
        """The ``## Known Facts`` block for ``query`` (``{context, memoriesUsed, tokensUsed, tokenBudget}``)."""
        return self._call(_calls.context(user, query, token_budget, limit, persona, channel))

    def list_memories(
        self, persona: str, *, scope: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[Memory]:
        """A persona's memories, newest first (``scope``: global, channel:NAME, user:ID)."""
        return self._call(_calls.list_memories(persona, scope, limit, offset))

    def forget_memory(self, memory_id: int) -> Memory:
        """Delete a memory; returns what was deleted."""
        return self._call(_calls.forget(memory_id))

    def budget(
        self, persona: str, channel: str, *, user: str | None = None, message: str | None = None
    ) -> dict[str, Any]:
        """Where the tokens of the persona's next prompt in ``channel`` would go."""
        return self._call(_calls.budget(persona, channel, user, message))

    # -- streams ---------------------------------------------------------------------------

    def chat(
        self,
        persona: str,
        channel: str,
        user: str,
        message: str,
        *,
        disable_memory: bool = False,
        visibility: str | None = None,
    ) -> Iterator[StreamEvent]:
        """Send a message and yield the turn's events: ``memory_context``, ``history_context``,
        ``token_delta``…, ``tool_call``/``tool_result``, then ``done`` or ``error``."""
        body = _calls.chat_body(persona, channel, user, message, disable_memory, visibility)
        timeout = httpx.Timeout(self._timeout, read=STREAM_READ_TIMEOUT)
        try:
            with connect_sse(self._http, "POST", "/v1/chat", json=body, timeout=timeout) as source:
                if source.response.status_code != 200:
                    raise error_from(source.response, source.response.read())
                for sse in source.iter_sse():
                    event = _calls.to_event(sse)
                    if event is not None:
                        yield event
        except httpx.TransportError as exc:
            raise DaemonUnreachable(self.url, exc) from exc

    def follow(self, channel: str, *, last_event_id: str | None = None, reconnect: bool = True) -> Feed:
        """Follow a channel's feed: stored ``message`` events (with ids) after
        ``last_event_id`` (default: from now), then live turn events. With ``reconnect``
        a dropped stream is resumed with ``Last-Event-ID``, after a backoff."""
        return Feed(self, channel, last_event_id, reconnect)


class Feed(FeedState):
    """An iterable channel feed that resumes where it left off. ``last_event_id`` is the
    id of the last ``message`` event seen; ``close()`` (from any thread) ends it."""

    def __init__(self, client: AgentdClient, channel: str, last_event_id: str | None, reconnect: bool) -> None:
        super().__init__(channel, last_event_id, reconnect)
        self._client = client
        self._closed = threading.Event()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stop: at once when called between two events (in the loop's body), else at the next event
        or wait (the open connection ends with its next read)."""
        self._closed.set()

    def __iter__(self) -> Iterator[StreamEvent]:
        client = self._client
        path = _calls.channel_path(self.channel, "events")
        timeout = httpx.Timeout(client._timeout, read=STREAM_READ_TIMEOUT)
        while not self._closed.is_set():
            headers = self.connecting()
            try:
                with connect_sse(client._http, "GET", path, headers=headers, timeout=timeout) as source:
                    if source.response.status_code != 200:
                        self.refused(error_from(source.response, source.response.read()))
                    else:
                        for sse in source.iter_sse():
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
            self._closed.wait(wait)
