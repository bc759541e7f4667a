"""Chat: a user's message to a persona, stored and handed to the runtime, whoever sends it.

:func:`chat` is the one operation behind ``POST /v1/chat``, ``POST /v1/channels/{channel}/messages``
and MCP's ``chat`` tool. It decides, once, what every way in must agree on: the caller may use
the channel (never a delegation's internal one), and which persona answers (:func:`answering`:
the one named, else the one the message addresses, else the channel's; in a room the room
decides). The runtime (:class:`Turns`, given by the adapter with :func:`in_conversation`) then
checks the message itself, that the caller may speak as the user, and admission, and stores it
before anything else happens; the turn's events go to the adapter's sink (a stream, a queue).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, cast

from pydantic import Field

from agentd._exceptions import Forbidden, InvalidInput
from agentd.config import MAX_MESSAGE_CHARS
from agentd.identity import Caller, acting_user
from agentd.ops.addressing import addressed_to
from agentd.ops.base import ADAPTER, ADMIN, OpContext, Parts, Request, Result, operation, parse
from agentd.ops.fields import Identifier, PersonaName, Text
from agentd.scopes import DELEGATION_MARK, check_identifier

#: Who reads a channel: ``direct`` (this user and the persona) or ``shared``.
Visibility = Literal["direct", "shared"]
VISIBILITY_FIELD = Field(
    default=None,
    description="Who reads the channel: 'direct' (only this user and the persona) or 'shared' (the default). "
    "The channel's first message that says so decides; [channels.NAME] visibility in the config wins.",
)
#: Who may chat: admin keys, and adapter keys in their channels for the users they own.
ROLES = (ADMIN, ADAPTER)


class ChatRequest(Request):
    """``POST /v1/chat``."""

    persona: PersonaName | None = Field(
        default=None,
        description="The persona that answers (default: the one the message addresses, else the channel's; "
        "in a room, the room decides: [channels.NAME] answer).",
    )
    channel: Identifier = Field(description="The channel the conversation lives in.")
    user: Identifier = Field(description="Who is speaking (scopes user memories and earlier exchanges).")
    message: Text = Field(
        max_length=MAX_MESSAGE_CHARS, description="The user's message (at most [runtime] max_message_chars: 32000)."
    )
    disable_memory: bool = Field(False, description="Skip automatic memory retrieval for this message.")
    visibility: Visibility | None = VISIBILITY_FIELD


class ChannelPost(Request):
    """``POST /v1/channels/{channel}/messages``."""

    user: Identifier = Field(description="Who is speaking.")
    text: Text = Field(max_length=MAX_MESSAGE_CHARS, description="The message (at most [runtime] max_message_chars).")
    persona: PersonaName | None = Field(
        default=None, description="Who answers (default: the persona bound to the channel)."
    )
    disable_memory: bool = False
    visibility: Visibility | None = VISIBILITY_FIELD

    def request(self, channel: str) -> ChatRequest:
        """The same message as a chat in ``channel``."""
        return parse(
            ChatRequest,
            {
                "persona": self.persona,
                "channel": channel,
                "user": self.user,
                "message": self.text,
                "disable_memory": self.disable_memory,
                "visibility": self.visibility,
            },
        )


class ChatToolArgs(Request):
    """MCP's ``chat``: the session gives the user, and the persona and channel it was opened with."""

    message: Text = Field(max_length=MAX_MESSAGE_CHARS, description="The message, as the user would write it.")
    persona: PersonaName | None = Field(default=None, description="Who answers (default: this session's persona).")
    channel: Identifier | None = Field(
        default=None,
        description="The conversation (default: this session's channel, else the session user's "
        "own direct channel dm-USER, where all of their memories may be recalled).",
    )
    visibility: Visibility | None = Field(
        default=None,
        description="Who reads a new channel: direct (only this user, who may then be reminded "
        "of anything they said anywhere) or shared (the default: only what was learned there).",
    )

    def request(self, ctx: OpContext) -> ChatRequest:
        """The chat of the session's user: in the session user's own channel ``dm-USER`` unless a
        channel is given (there what this session stored, scope user, is recalled)."""
        # A key (its name, the users it was made for) or, in process, the operator.
        who = cast(Caller, ctx.rights) if isinstance(getattr(ctx.rights, "name", None), str) else ctx
        user = ctx.user or acting_user(None, who, ctx.parts.config)
        own = f"dm-{user}"
        channel = self.channel or ctx.channel or own
        persona = self.persona or ctx.persona or _sole(ctx.parts)
        given = {"persona": persona, "channel": channel, "user": user, "message": self.message}
        visibility = self.visibility or ("direct" if channel == own else None)
        return parse(ChatRequest, {**given, "visibility": visibility})


class ChatAccepted(Result):
    """A stored message and the request that answers it."""

    message_id: int
    request_id: str
    persona: str = Field(description="Who answers first ('': nobody was asked to, in a room).")
    channel: str
    also: list[str] = Field(default_factory=list, description="In a room, who answers after it, in order.")


class AcceptedTurn(Protocol):
    """What the runtime says of a stored message (:class:`agentd.runtime.Accepted`)."""

    @property
    def message_id(self) -> int:
        """The stored message's id."""
        ...

    @property
    def request_id(self) -> str:
        """The request that answers it."""
        ...

    @property
    def persona(self) -> str:
        """Who answers first."""
        ...

    @property
    def also(self) -> Sequence[str]:
        """Who answers after it."""
        ...


class Turns(Protocol):
    """What takes a message and answers it (:class:`agentd.runtime.Runtime`)."""

    def submit(
        self,
        persona: str | None,
        channel: str,
        user: str,
        text: str,
        *,
        disable_memory: bool = False,
        sink: Callable[[Any], None] | None = None,
        source: str = "chat",
        disable_tools: bool = False,
        visibility: str | None = None,
        caller: Any = None,
    ) -> AcceptedTurn:
        """Check, store and hand on the message; its turn's events go to ``sink``."""
        ...


@dataclass(frozen=True)
class Conversation:
    """Where a chat goes: the runtime, the sink of its turn's events, the source it is stored with
    (and ``disable_tools``: the persona's tools are not offered, as an OpenAI client may ask)."""

    turns: Turns
    sink: Callable[[Any], None] | None = None
    source: str = "chat"
    disable_tools: bool = False


#: Where :func:`in_conversation` keeps the conversation in the context.
_CONVERSATION = "conversation"


def in_conversation(
    ctx: OpContext,
    turns: Turns,
    sink: Callable[[Any], None] | None = None,
    source: str = "chat",
    *,
    disable_tools: bool = False,
) -> OpContext:
    """``ctx``, with the runtime a chat goes to and the sink of its events."""
    return replace(ctx, extra={**ctx.extra, _CONVERSATION: Conversation(turns, sink, source, disable_tools)})


@operation("chat", roles=ROLES)
def chat(ctx: OpContext, request: ChatRequest) -> ChatAccepted:
    """Store ``message`` and hand its turn on: the persona's reply arrives on the conversation's sink."""
    conversation = ctx.extra.get(_CONVERSATION)
    if not isinstance(conversation, Conversation):
        raise TypeError("chat needs a runtime: call it with in_conversation(ctx, runtime, sink)")
    check_channel(ctx, request.channel)
    persona = answering(ctx.parts, request.channel, request.persona, request.message)
    accepted = conversation.turns.submit(
        persona,
        request.channel,
        request.user,
        request.message,
        disable_memory=request.disable_memory,
        sink=conversation.sink,
        source=conversation.source,
        disable_tools=conversation.disable_tools,
        visibility=request.visibility,
        caller=ctx.rights,
    )
    return ChatAccepted(
        message_id=accepted.message_id,
        request_id=accepted.request_id,
        persona=accepted.persona,
        channel=request.channel,
        also=list(accepted.also),
    )


def check_channel(ctx: OpContext, channel: str) -> None:
    """Refuse a delegation's internal channel (to everyone), and a channel the caller may not use."""
    refuse_delegation(channel)
    ctx.check_channel(channel)


def refuse_delegation(channel: str) -> None:
    """Refuse (403) a delegation's internal channel: no one posts to it or follows it from outside."""
    if DELEGATION_MARK in channel:
        raise Forbidden(
            f"{channel!r} is a delegation's internal channel (its name has {DELEGATION_MARK!r}): "
            "it cannot be posted to or followed from outside"
        )


def answering(parts: Parts, channel: str, named: str | None, text: str | None = None) -> str | None:
    """:func:`persona_for`, except in a room (``[channels.NAME]`` binding several personas) when
    the request names no persona: ``None``, the room decides who answers (the runtime's intake,
    :mod:`agentd.runtime.rooms`)."""
    if room_decides(parts, channel, named):
        check_identifier("channel", channel)
        return None
    return persona_for(parts, channel, named, text)


def room_decides(parts: Parts, channel: str, named: str | None) -> bool:
    """True when the room ``channel`` (``[channels.NAME]`` binding several personas) decides who
    answers: the request names no persona."""
    entry = parts.config.channels.get(channel)
    return named is None and entry is not None and len(entry.personas) > 1


def persona_for(parts: Parts, channel: str, named: str | None, text: str | None = None) -> str:
    """The persona that answers in ``channel``.

    1. ``named`` (the request's ``persona`` field), if given: it must be allowed here.
    2. The persona the message ``text`` addresses (``NAME: ...``, ``NAME, ...``,
       ``@NAME``; :mod:`agentd.ops.addressing`) among those allowed here.
    3. The channel's default.

    Allowed here: a channel bound in config (``[channels.NAME] personas = [...]``)
    is answered only by those personas, and its default is the first; any other
    channel may be answered by any persona, and its default is the single
    persona whose ``channels`` globs match it (several matching: name one).
    """
    check_identifier("channel", channel)
    personas = parts.personas
    entry = parts.config.channels.get(channel)
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
    return _matching(parts, channel)


def _matching(parts: Parts, channel: str) -> str:
    """The single persona whose ``channels`` globs match ``channel``."""
    matching = [p.name for p in parts.personas.bound_to(channel)]
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


def _sole(parts: Parts) -> str | None:
    """The only persona there is (an MCP session that names none talks to it), else ``None``."""
    names = list(parts.personas)
    return names[0] if len(names) == 1 else None


__all__ = [
    "ChannelPost",
    "ChatAccepted",
    "ChatRequest",
    "ChatToolArgs",
    "Conversation",
    "Turns",
    "Visibility",
    "answering",
    "chat",
    "check_channel",
    "in_conversation",
    "persona_for",
    "refuse_delegation",
    "room_decides",
]
