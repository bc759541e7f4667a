"""The blocking client: :class:`AgentdClient`, carrying out the programs of :mod:`agentd.client._program`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, TypeVar

import httpx
from httpx_sse import ServerSentEvent, connect_sse

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

#: Default base URL (``agentd serve``'s default bind).
DEFAULT_URL = "http://127.0.0.1:8765"
#: A stream with no byte for this long is dead (the daemon sends a keep-alive every 15 s).
STREAM_READ_TIMEOUT = 60.0


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer KEY`` when a key is given."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class _BlockingSteps:
    """Carries out one program's steps with blocking I/O: at most one stream open at a time,
    closed at the next :class:`Open` or :class:`Wait` and when the program ends."""

    def __init__(self, client: AgentdClient, closed: threading.Event | None = None) -> None:
        self._client = client
        self._closed = closed
        self.streams = ExitStack()
        self._frames: Iterator[ServerSentEvent] = iter(())

    def do(self, step: Step) -> Reply:
        """The step's reply; a connection that failed is answered, not raised."""
        try:
            return self._do(step)
        except httpx.TransportError as exc:
            return unreachable(self._client.url, exc)

    def _do(self, step: Step) -> Reply:
        http = self._client._http
        if isinstance(step, Send):
            call = step.call
            return http.request(call.method, call.path, params=call.params, json=call.json)
        if isinstance(step, Next):
            return next(self._frames, None)
        self.streams.close()
        if isinstance(step, Open):
            timeout = httpx.Timeout(self._client._timeout, read=STREAM_READ_TIMEOUT)
            opening = connect_sse(http, step.method, step.path, headers=step.headers, json=step.json, timeout=timeout)
            source = self.streams.enter_context(opening)
            if source.response.status_code != 200:
                source.response.read()
            self._frames = source.iter_sse()
            return source.response
        if isinstance(step, Wait):
            if self._closed is None:
                time.sleep(step.seconds)
            else:
                self._closed.wait(step.seconds)
        return None

    def run(self, program: Program[T]) -> T:
        """Run a program to its result."""
        with self.streams:
            reply: Reply = None
            while True:
                try:
                    step = program.send(reply)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
                reply = self.do(step)

    def stream(self, program: Program[None]) -> Iterator[StreamEvent]:
        """Run a program, yielding the events it emits."""
        with self.streams:
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
                    reply = self.do(step)


class AgentdClient:
    """A running daemon's HTTP API, blocking. Use as a context manager, or ``close()``.

    Answers are the models the API serves (:mod:`agentd.schemas.responses`). Errors the daemon
    answers raise the :class:`~agentd.client.errors.ApiError` subclass for their code (status,
    code, field, message); not reaching it raises :class:`~agentd.client.DaemonUnreachable`.
    ``busy_patience``: how many seconds :meth:`post` keeps posting again while the daemon
    answers ``429`` (after its ``Retry-After``) or refuses the connection (0: never).
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

    def _call(self, call: _calls.Call[T]) -> T:
        return _BlockingSteps(self).run(calling(call))

    def health(self) -> Health:
        """``GET /healthz``: status, version, actors."""
        return self._call(_calls.health())

    def personas(self) -> list[PersonaOut]:
        """Every persona with its model, window and channels."""
        return self._call(_calls.personas())

    def bindings(self) -> dict[str, list[str]]:
        """The personas each configured channel is bound to (``[channels.NAME] personas``; several: a room)."""
        return self._call(_calls.bindings())

    def post(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        persona: str | None = None,
        disable_memory: bool = False,
        visibility: str | None = None,
    ) -> PostAccepted:
        """Post a message to a channel (stored at once; the reply arrives on :meth:`follow`).

        ``visibility``: ``direct`` (only this user and the persona read the channel) or
        ``shared``; the channel's first post that says so decides. A ``429`` (nothing stored)
        or a refused connection is retried for up to ``busy_patience`` seconds; nothing that
        may have been stored is.
        """
        call = _calls.post(channel, user, text, persona, disable_memory, visibility)
        return _BlockingSteps(self).run(posting(call, Patience(self.busy_patience)))

    def messages(self, channel: str, after: int = 0, limit: int = 100) -> list[MessageOut]:
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
    ) -> tuple[MemoryOut, bool]:
        """Store a memory (global unless ``scope``, ``user`` or ``channel``): the memory, and
        whether it was new (False: an identical one was stored already)."""
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
    ) -> list[MemoryHitOut]:
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
    ) -> KnownFactsResponse:
        """The ``## Known Facts`` block for ``query`` (``context``, ``memoriesUsed``, ``tokensUsed``,
        ``tokenBudget``)."""
        return self._call(_calls.context(user, query, token_budget, limit, persona, channel))

    def list_memories(
        self, persona: str, *, scope: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[MemoryOut]:
        """A persona's memories, newest first (``scope``: global, channel:NAME, user:ID)."""
        return self._call(_calls.list_memories(persona, scope, limit, offset))

    def forget_memory(self, memory_id: int) -> MemoryOut:
        """Delete a memory; returns what was deleted."""
        return self._call(_calls.forget(memory_id))

    def budget(
        self, persona: str, channel: str, *, user: str | None = None, message: str | None = None
    ) -> BudgetResponse:
        """Where the tokens of the persona's next prompt in ``channel`` would go."""
        return self._call(_calls.budget(persona, channel, user, message))

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
        return _BlockingSteps(self).stream(chatting(body))

    def follow(self, channel: str, *, last_event_id: str | None = None, reconnect: bool = True) -> Feed:
        """Follow a channel's feed: stored ``message`` events (with ids) after
        ``last_event_id`` (default: from now), then live turn events. With ``reconnect``
        a dropped stream is resumed with ``Last-Event-ID``, after a backoff."""
        return Feed(self, channel, last_event_id, reconnect)


class Feed(FeedState):
    """An iterable channel feed that resumes where it left off. ``last_event_id`` is the
    id of the last ``message`` event seen; ``close()`` (from any thread) ends it."""

    def __init__(self, client: AgentdClient, channel: str, last_event_id: str | None, reconnect: bool) -> None:
        self._closing = threading.Event()
        super().__init__(channel, last_event_id, reconnect, self._closing)
        self._client = client

    def __iter__(self) -> Iterator[StreamEvent]:
        return _BlockingSteps(self._client, self._closing).stream(following(self))
