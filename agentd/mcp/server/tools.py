"""The tools agentd serves over MCP, over the same service functions as the HTTP API.

``recall`` and ``memory_context`` call :func:`agentd.recall.known_facts.search` (what
``POST /v1/memory/search`` and ``POST /v1/memory/context`` call), ``remember``,
``forget`` and ``list_memories`` the :class:`~agentd.memory.MemoryService` methods
behind ``/v1/memories``, and ``chat`` submits a message to the runtime as
``POST /v1/chat`` does: the user's scope rules, the channel's visibility rules and
the thresholds are the HTTP API's, on one code path.

Each tool admits the roles its HTTP twin admits (:data:`ADMITTED`); another role's
call fails with ``forbidden``, and every failure is a tool result with
``isError`` and ``{"error": {"code", "message", "field"}}``, the catalogue's code.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agentd._exceptions import AgentdError, ErrorCode, Forbidden, InvalidInput, NotFound, TurnError
from agentd.access.identity import acting_user
from agentd.access.scopes import DELEGATION_MARK, GLOBAL, Scope, check_identifier, unseen_character
from agentd.recall import known_facts
from agentd.runtime.events import Done, Error, Event, MemoryContext, ToolCall, ToolResult

if TYPE_CHECKING:
    from agentd.app import App
    from agentd.config import Config
    from agentd.runtime import Runtime

#: The roles (as the daemon's keys name them) each tool admits: its HTTP twin's.
ADMITTED: dict[str, tuple[str, ...]] = {
    "remember": ("admin",),  # POST /v1/memories
    "recall": ("admin", "service"),  # POST /v1/memory/search
    "forget": ("admin",),  # DELETE /v1/memories/{id}
    "memory_context": ("admin", "service"),  # POST /v1/memory/context
    "list_memories": ("admin",),  # GET /v1/memories
    "chat": ("admin", "adapter"),  # POST /v1/chat (an adapter: its channels only)
}
#: How long ``chat`` waits for the turn's end.
CHAT_TIMEOUT_SECONDS = 300.0


class McpCaller(Protocol):
    """Who calls: a key's role and name, and the channels it may use (the daemon's principal)."""

    @property
    def role(self) -> str:
        """``admin``, ``adapter`` or ``service``."""
        ...

    @property
    def name(self) -> str:
        """The key's name."""
        ...

    def may_use_channel(self, channel: str) -> bool:
        """True when this caller may post to ``channel``."""
        ...

    def may_act_as(self, user: str) -> bool:
        """True when this caller may chat as ``user``."""
        ...


@dataclass(frozen=True)
class LocalCaller:
    """The person running ``agentd mcp`` on stdio: they own the store, as every CLI command does."""

    role: str = "admin"
    name: str = "local"

    def may_use_channel(self, channel: str) -> bool:
        """Every channel."""
        return True

    def may_act_as(self, user: str) -> bool:
        """Every user."""
        return True


@dataclass(frozen=True)
class Session:
    """What one MCP connection acts for: ``agentd mcp``'s options, or ``/mcp``'s query or headers."""

    persona: str | None = None
    user: str | None = None
    channel: str | None = None
    caller: McpCaller = LocalCaller()


def _str(arguments: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = arguments.get(name)
    if value is None:
        if required:
            raise InvalidInput(name, "is required")
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidInput(name, "must be a non-empty string" if required else "must be a string")
    return value


def _int(arguments: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(name, "must be an integer")
    if not low <= value <= high:
        raise InvalidInput(name, f"must be between {low} and {high}")
    return value


def _score(arguments: dict[str, Any], name: str) -> float | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidInput(name, "must be a number between 0 and 1")
    return float(value)


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


#: Each tool: its description and input schema (the MCP ``tools/list`` entry).
DEFINITIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "remember": (
        (
            "Store a fact, preference or decision in agentd's long-term memory, so that it is recalled later "
            "(by `recall`, and automatically before the persona's replies). An identical memory is not stored twice."
        ),
        _schema(
            {
                "text": {"type": "string", "description": "The memory, as a short self-contained sentence."},
                "category": {"type": "string", "description": "preference, fact, decision, ... (default fact)."},
                "scope": {
                    "type": "string",
                    "enum": ["user", "channel", "global"],
                    "description": "user: only for this session's user (the default when it has one); channel: "
                    "for everyone in this session's channel; global: everywhere.",
                },
            },
            ["text"],
        ),
    ),
    "recall": (
        (
            "Search long-term memory for facts, preferences or context relevant to a query: the best first, "
            "each with its text, category, relevance score (0-1, time-decayed), created_at and id. Only memories "
            "this session's user may see (global, its channel's, its own)."
        ),
        _schema(
            {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "description": "At most this many results (default 5).",
                },
                "minScore": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "description": "Leave out results less relevant than this (default: none).",
                },
            },
            ["query"],
        ),
    ),
    "forget": (
        "Delete one memory by its id (as `recall` or `list_memories` give it).",
        _schema({"id": {"type": "integer", "minimum": 1, "description": "The memory's id."}}, ["id"]),
    ),
    "memory_context": (
        (
            "The memories relevant to a query, best first, as a ready-to-use Markdown block headed "
            "`## Known Facts (from memory)` that fits a token budget: paste it into a prompt."
        ),
        _schema(
            {
                "query": {"type": "string", "description": "What the context is for."},
                "tokenBudget": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100000,
                    "description": "The most tokens the block may take (default 2000).",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 1000,
                    "description": "At most this many memories considered (default 20).",
                },
            },
            ["query"],
        ),
    ),
    "list_memories": (
        "The persona's stored memories, newest first, with their ids, scopes and categories.",
        _schema(
            {
                "scope": {
                    "type": "string",
                    "description": "Only this scope: global, channel:NAME or user:ID (default: all).",
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "Default 100."},
                "offset": {"type": "integer", "minimum": 0, "description": "Skip this many (default 0)."},
            },
            [],
        ),
    ),
    "chat": (
        (
            "Send a message to an agentd persona and get its reply. The persona recalls what it knows first; "
            "the answer says which memories it was given and which tools it called."
        ),
        _schema(
            {
                "message": {"type": "string", "description": "The message, as the user would write it."},
                "persona": {"type": "string", "description": "Who answers (default: this session's persona)."},
                "channel": {
                    "type": "string",
                    "description": "The conversation (default: this session's channel, else the session user's "
                    "own direct channel dm-USER, where all of their memories may be recalled).",
                },
                "visibility": {
                    "type": "string",
                    "enum": ["direct", "shared"],
                    "description": "Who reads a new channel: direct (only this user, who may then be reminded "
                    "of anything they said anywhere) or shared (the default: only what was learned there).",
                },
            },
            ["message"],
        ),
    ),
}


class Tools:
    """The tools over one App's parts; ``runtime`` gives the runtime ``chat`` submits to (built on
    first use by ``agentd mcp``, the daemon's own on ``/mcp``). Every method blocks: call it off
    the event loop."""

    def __init__(self, app: App, runtime: Callable[[], Runtime]) -> None:
        self._app = app
        self._runtime = runtime

    @property
    def config(self) -> Config:
        """The configuration the tools act under."""
        return self._app.config

    def call(self, name: str, arguments: dict[str, Any] | None, session: Session) -> dict[str, Any]:
        """Run tool ``name``; raises :class:`~agentd.AgentdError` (its code is the tool error's)."""
        if name not in DEFINITIONS:
            raise NotFound("tool", name, f"known tools: {', '.join(DEFINITIONS)}")
        who = session.caller
        if who.role not in ADMITTED[name]:
            raise Forbidden(
                f"the {who.role} key {who.name!r} may not call {name}: it needs a key with the role "
                f"{' or '.join(ADMITTED[name])}"
            )
        args = arguments or {}
        unknown = sorted(set(args) - set(DEFINITIONS[name][1]["properties"]))
        if unknown:
            raise InvalidInput(unknown[0], "unknown argument")
        handler: Callable[[dict[str, Any], Session], dict[str, Any]] = getattr(self, f"_{name}")
        return handler(args, session)

    # -- the tools -------------------------------------------------------------------------

    def _remember(self, args: dict[str, Any], s: Session) -> dict[str, Any]:
        text = _str(args, "text", required=True)
        assert text is not None
        self._check_length(text)
        category = _str(args, "category") or "fact"
        where = _str(args, "scope") or ("user" if s.user else "channel" if s.channel else "global")
        if where == "user":
            if not s.user:
                raise InvalidInput("scope", "user needs a session user (agentd mcp --user, /mcp?user=)")
            scope = Scope.user(s.user)
        elif where == "channel":
            if not s.channel:
                raise InvalidInput("scope", "channel needs a session channel (agentd mcp --channel, /mcp?channel=)")
            scope = Scope.channel(s.channel)
        elif where == "global":
            scope = GLOBAL
        else:
            raise InvalidInput("scope", "must be one of user, channel, global")
        memory, created = self._app.memory.add(self._persona(s), scope, text, category)
        return {"stored": created, "memory": memory.as_json()}

    def _recall(self, args: dict[str, Any], s: Session) -> dict[str, Any]:
        query = _str(args, "query", required=True)
        assert query is not None
        limit = _int(args, "limit", 1, 100) or self._app.config.memory.recall_limit
        hits = known_facts.search(
            self._app.memory,
            query,
            self._searched(s),
            user=s.user,
            channel=s.channel,
            limit=limit,
            min_relevance=_score(args, "minScore") or 0.0,
        )
        return {"results": [{**h.as_recall_result(), "id": h.memory.id} for h in hits], "total_found": len(hits)}

    def _forget(self, args: dict[str, Any], s: Session) -> dict[str, Any]:
        memory_id = _int(args, "id", 1, 2**63 - 1)
        if memory_id is None:
            raise InvalidInput("id", "is required")
        return {"forgotten": self._app.memory.forget(memory_id).as_json()}

    def _memory_context(self, args: dict[str, Any], s: Session) -> dict[str, Any]:
        query = _str(args, "query", required=True)
        assert query is not None
        if not s.user:
            raise InvalidInput("user", "memory_context needs a session user (agentd mcp --user, /mcp?user=)")
        cfg = self._app.config.memory
        personas = self._searched(s)
        hits = known_facts.search(
            self._app.memory,
            query,
            personas,
            user=s.user,
            channel=s.channel,
            limit=_int(args, "limit", 1, 1000) or cfg.limit,
            min_relevance=0.0,
        )
        budget = _int(args, "tokenBudget", 1, 100_000) or cfg.token_budget
        return known_facts.known_facts(hits, budget, self._count(personas)).as_json()

    def _list_memories(self, args: dict[str, Any], s: Session) -> dict[str, Any]:
        persona = self._persona(s)
        scope = _str(args, "scope")
        parsed = Scope.parse(scope) if scope is not None else None
        limit = _int(args, "limit", 1, 10_000) or 100
        offset = _int(args, "offset", 0, 2**63 - 1) or 0
        memories = self._app.memory.list_memories(persona, parsed, limit, offset)
        return {"memories": [m.as_json() for m in memories], "total": self._app.memory.count(persona)}

    def _chat(self, args: dict[str, Any], s: Session) -> dict[str, Any]:
        message = _str(args, "message", required=True)
        assert message is not None
        persona = self._persona(s, _str(args, "persona"))
        user = s.user or acting_user(None, s.caller, self._app.config)
        # The session user's own channel by default, as the OpenAI endpoint and the web page: there
        # what this session stored (remember, scope user) is recalled.
        own = f"dm-{user}"
        channel = _str(args, "channel") or s.channel or own
        check_identifier("channel", channel)
        self._check_channel(s.caller, channel, persona)
        events: queue.Queue[Event] = queue.Queue()
        accepted = self._runtime().submit(
            persona,
            channel,
            user,
            message,
            sink=events.put,
            source="mcp",
            visibility=_str(args, "visibility") or ("direct" if channel == own else None),
            caller=s.caller,
        )
        return _outcome(accepted.persona, channel, events)

    # -- shared checks -----------------------------------------------------------------------

    def _persona(self, s: Session, named: str | None = None) -> str:
        """The persona a tool acts for: the call's, the session's, or the only one."""
        personas = self._app.personas
        for given in (named, s.persona):
            unseen = unseen_character(given) if given else None
            if unseen is not None:
                raise InvalidInput("persona", f"must not hold control, invisible or bidirectional characters: {unseen}")
        if named or s.persona:
            return personas[named or s.persona or ""].name  # NotFound names the known ones
        if len(personas) == 1:
            return next(iter(personas))
        raise InvalidInput(
            "persona",
            f"this session names no persona (agentd mcp --persona P, /mcp?persona=P); known: {', '.join(personas)}",
        )

    def _searched(self, s: Session) -> list[str]:
        """The personas a search covers: the session's, else all (as the HTTP API)."""
        if s.user is not None:
            check_identifier("user", s.user)
        if s.channel is not None:
            check_identifier("channel", s.channel)
        return [self._app.personas[s.persona].name] if s.persona else list(self._app.personas)

    def _check_length(self, text: str) -> None:
        limit = self._app.config.memory.max_text_chars
        if len(text) > limit:
            raise InvalidInput("text", f"is {len(text)} characters; the limit is {limit} (memory.max_text_chars)")

    def _count(self, personas: list[str]) -> known_facts.TokenCount:
        """The largest count among the personas' tokenizers (the block fits any of them)."""
        builder = self._app.builder
        counters = {c.name: c for c in (builder.counter(self._app.personas[p]) for p in personas)}
        return lambda text: max((c.count(text) for c in counters.values()), default=0)

    def _check_channel(self, who: McpCaller, channel: str, persona: str) -> None:
        """As ``POST /v1/chat``: no delegation channel, an adapter's own channels, a bound channel's personas."""
        if DELEGATION_MARK in channel:
            raise Forbidden(f"{channel!r} is a delegation's internal channel: it cannot be posted to from outside")
        if not who.may_use_channel(channel):
            raise Forbidden(f"the {who.role} key {who.name!r} may not use channel {channel!r}")
        entry = self._app.config.channels.get(channel)
        if entry is not None and entry.personas and persona not in entry.personas:
            raise InvalidInput(
                "persona", f"{persona!r} is not bound to channel {channel!r} (bound: {', '.join(entry.personas)})"
            )


def _outcome(persona: str, channel: str, events: queue.Queue[Event]) -> dict[str, Any]:
    """Wait for the turn's end; the reply with what it was given, or its error."""
    recalled: MemoryContext | None = None
    calls: list[dict[str, Any]] = []
    while True:
        try:
            event = events.get(timeout=CHAT_TIMEOUT_SECONDS)
        except queue.Empty:
            raise TurnError(ErrorCode.REPLY_TIMEOUT, f"no reply within {CHAT_TIMEOUT_SECONDS:g} s") from None
        if isinstance(event, MemoryContext):
            recalled = event
        elif isinstance(event, ToolCall):
            calls.append({"name": event.name, "arguments": event.arguments})
        elif isinstance(event, ToolResult) and calls:
            calls[-1]["ok"] = event.error is None
        elif isinstance(event, Error):
            raise TurnError(event.code, event.message, event.cap, event.resets_at)
        elif isinstance(event, Done):
            return {
                "reply": event.text,
                "persona": persona,
                "channel": channel,
                "message_id": event.message_id,
                "memories": [
                    {"text": m.text, "category": m.category, "score": m.score}
                    for m in (recalled.memories if recalled else ())
                ],
                "tool_calls": calls,
            }


def error_result(exc: BaseException) -> dict[str, Any]:
    """The ``{"error": {...}}`` of a failed call: the catalogue's code, the field, the reason."""
    if isinstance(exc, AgentdError):
        error: dict[str, Any] = {"code": str(exc.code), "message": exc.message}
        for name in ("field", "cap", "resets_at"):  # what names the input, or the spend cap reached
            value = getattr(exc, name, None)
            if value:
                error[name] = value
        return {"error": error}
    return {"error": {"code": str(ErrorCode.INTERNAL_ERROR), "message": f"{type(exc).__name__}: {exc}"}}


def as_text(result: dict[str, Any]) -> str:
    """A result as the text content block clients show (JSON)."""
    return json.dumps(result, ensure_ascii=False)
