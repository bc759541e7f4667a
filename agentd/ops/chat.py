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
from typing import Any, Protocol

from agentd._exceptions import Forbidden, InvalidInput
from agentd.access.scopes import DELEGATION_MARK, check_identifier
from agentd.ops.addressing import addressed_to
from agentd.ops.base import ADAPTER, ADMIN, OpContext, Parts, operation
from agentd.ops.models import VISIBILITY_FIELD, ChannelPost, ChatAccepted, ChatArgs, ChatRequest, Visibility

#: Who may chat: admin keys, and adapter keys in their channels for the users they own.
ROLES = (ADMIN, ADAPTER)


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


__all__ = [
    "ChannelPost",
    "ChatAccepted",
    "ChatRequest",
    "ChatArgs",
    "Conversation",
    "Turns",
    "VISIBILITY_FIELD",
    "Visibility",
    "answering",
    "chat",
    "check_channel",
    "in_conversation",
    "persona_for",
    "refuse_delegation",
    "room_decides",
]
