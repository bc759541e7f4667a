"""The tools agentd serves over MCP: thin adapters over the operations of :mod:`agentd.ops`.

``remember``, ``recall``, ``forget``, ``memory_context`` and ``list_memories`` each call one
memory operation (:mod:`agentd.ops.memory`, what ``/v1/memories`` and ``/v1/memory/*`` call too):
the tool's input schema is its argument model's (:func:`~agentd.ops.base.tool_schema`), the
session (:class:`Session`) fills in the persona, user and channel, and the operation checks the
values, the scope and the roles it admits (a key of another role fails with ``forbidden``, before
its arguments are looked at, as over HTTP). ``chat`` submits a message to the runtime as
``POST /v1/chat`` does. Every failure is a tool result with ``isError`` and
``{"error": {"code", "message", "field"}}``, the catalogue's code.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from agentd._exceptions import AgentdError, ErrorCode, NotFound, TurnError
from agentd.access.identity import acting_user
from agentd.access.scopes import check_identifier
from agentd.ops import chat as chat_ops
from agentd.ops import memory as ops
from agentd.ops.base import OPERATIONS, OpContext, Request, parse, tool_schema
from agentd.runtime.events import Done, Error, Event, MemoryContext, ToolCall, ToolResult

if TYPE_CHECKING:
    from agentd.app import App
    from agentd.config import Config
    from agentd.runtime import Runtime

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


@dataclass(frozen=True)
class Tool:
    """One tool over one operation: its description, its arguments' model (the input schema), the
    operation whose roles it admits, and how its arguments run that operation."""

    description: str
    arguments: type[Request]
    operation: str
    run: Callable[[OpContext, Any], dict[str, Any]]


def _remember(ctx: OpContext, args: ops.RememberArgs) -> dict[str, Any]:
    added = ops.remember(ctx, args.to_request(ctx))
    return {"stored": added.created, "memory": added.memory.as_json()}


#: The memory tools, each over its operation.
TOOLS: dict[str, Tool] = {
    "remember": Tool(
        "Store a fact, preference or decision in agentd's long-term memory, so that it is recalled later "
        "(by `recall`, and automatically before the persona's replies). An identical memory is not stored twice.",
        ops.RememberArgs,
        "memory_remember",
        _remember,
    ),
    "recall": Tool(
        "Search long-term memory for facts, preferences or context relevant to a query: the best first, "
        "each with its text, category, relevance score (0-1, time-decayed), created_at and id. Only memories "
        "this session's user may see (global, its channel's, its own).",
        ops.RecallArgs,
        "memory_recall",
        lambda ctx, args: ops.recall(ctx, args).model_dump(mode="json", by_alias=True, exclude_none=True),
    ),
    "forget": Tool(
        "Delete one memory by its id (as `recall` or `list_memories` give it).",
        ops.ForgetMemory,
        "memory_forget",
        lambda ctx, args: ops.forget(ctx, args).as_json(),
    ),
    "memory_context": Tool(
        "The memories relevant to a query, best first, as a ready-to-use Markdown block headed "
        "`## Known Facts (from memory)` that fits a token budget: paste it into a prompt.",
        ops.ContextArgs,
        "memory_context",
        lambda ctx, args: ops.context(ctx, args.to_request(ctx)).as_json(),
    ),
    "list_memories": Tool(
        "The persona's stored memories, newest first, with their ids, scopes and categories.",
        ops.ListArgs,
        "memory_list",
        lambda ctx, args: ops.list_memories(ctx, args.to_request(ctx)).as_json(),
    ),
}
#: The roles (as the daemon's keys name them) each tool admits: its operation's (its HTTP twin's).
ADMITTED: dict[str, tuple[str, ...]] = {
    **{name: OPERATIONS[tool.operation].key_roles for name, tool in TOOLS.items()},
    "chat": OPERATIONS["chat"].key_roles,  # POST /v1/chat (an adapter: its channels only)
}


#: Each tool: its description and input schema (the MCP ``tools/list`` entry).
DEFINITIONS: dict[str, tuple[str, dict[str, Any]]] = {
    **{name: (tool.description, tool_schema(tool.arguments)) for name, tool in TOOLS.items()},
    "chat": (
        (
            "Send a message to an agentd persona and get its reply. The persona recalls what it knows first; "
            "the answer says which memories it was given and which tools it called."
        ),
        tool_schema(chat_ops.ChatArgs),
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
        tool = TOOLS.get(name)
        if tool is not None:
            ctx = self.context(session)
            ctx.require(name, OPERATIONS[tool.operation].roles)  # before the arguments, as over HTTP
            return tool.run(ctx, parse(tool.arguments, arguments))
        # chat: the one tool that waits for the runtime.
        ctx = self.context(session)
        ctx.require(name, OPERATIONS["chat"].roles)
        # A session without a user chats as its key's user (the operator's default user on stdio).
        ctx = replace(ctx, user=ctx.user or acting_user(None, session.caller, self._app.config))
        return self._chat(parse(chat_ops.ChatArgs, arguments), ctx)

    def context(self, s: Session) -> OpContext:
        """Who a session's call acts as, and for whom: its key, persona, user and channel."""
        if s.user is not None:
            check_identifier("user", s.user)
        if s.channel is not None:
            check_identifier("channel", s.channel)
        # The session's persona is checked once, here, as a named one is (NotFound names the known ones).
        persona = OpContext(self._app).persona_for(s.persona) if s.persona else None
        caller = s.caller
        return OpContext(
            self._app, caller.role, caller.name, caller, persona=persona, user=s.user, channel=s.channel, via="mcp"
        )

    # -- chat ------------------------------------------------------------------------------

    def _chat(self, args: chat_ops.ChatArgs, ctx: OpContext) -> dict[str, Any]:
        """:func:`agentd.ops.chat.chat` (as ``POST /v1/chat``), waiting for the reply."""
        request = args.to_request(ctx)
        events: queue.Queue[Event] = queue.Queue()
        accepted = chat_ops.chat(chat_ops.in_conversation(ctx, self._runtime(), events.put, "mcp"), request)
        return _outcome(accepted.persona, request.channel, events)


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
