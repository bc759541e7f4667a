"""What a turn emits, in order: MemoryContext → HistoryContext → TokenDelta… →
ToolCall/ToolResult… → Done | Error (a call waiting for an owner: ApprovalRequired → Error
``awaiting_approval``; the resumed turn's events follow the decision).

Events are frozen dataclasses; ``as_json()`` carries the event's ``type``
(``memory_context``, ``history_context``, ``token_delta``, ``tool_call``,
``tool_result``, ``approval_required``, ``persona_turns_stopped``, ``done``, ``error``), which is
also the SSE ``event:`` name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any, ClassVar

from agentd._exceptions import ErrorCode
from agentd.recall.status import RecallStatus


@dataclass(frozen=True)
class MemorySnippet:
    """One recalled memory as the user sees it (text, category, score)."""

    text: str
    category: str
    score: float
    relevance: float
    id: int
    scope: str


@dataclass(frozen=True)
class Event:
    """Base of every event."""

    type: ClassVar[str] = "event"

    def as_json(self) -> dict[str, Any]:
        """``{"type": ..., **fields}``."""
        return {"type": self.type, **asdict(self)}


@dataclass(frozen=True)
class MemoryContext(Event):
    """The memories recalled for this reply; always the first event of a turn.

    ``status`` says why the list may be empty (:class:`RecallStatus`).
    ``near_misses`` are the best memories just below the relevance threshold
    (``memory.min_score``): not in the prompt, shown so people can see what almost
    counted (added after ``memories``; readers that do not know it ignore it).
    """

    type: ClassVar[str] = "memory_context"
    memories: tuple[MemorySnippet, ...] = ()
    status: RecallStatus = RecallStatus.OK
    user_message_id: int | None = None
    near_misses: tuple[MemorySnippet, ...] = ()
    #: Earlier exchanges recalled by meaning that the prompt carries (``[episodes]``; added after
    #: ``near_misses``; their ``category`` is ``episode``).
    episodes: tuple[MemorySnippet, ...] = ()


@dataclass(frozen=True)
class HistorySnippet:
    """One earlier exchange with this user that was recalled."""

    message_id: int
    user: str
    assistant: str | None


@dataclass(frozen=True)
class HistoryContext(Event):
    """The user's earlier exchanges recalled for this reply, and the search seeds taken from them."""

    type: ClassVar[str] = "history_context"
    snippets: tuple[HistorySnippet, ...] = ()
    seeds: tuple[str, ...] = ()
    #: ``disabled`` when memory is off for this request or earlier exchanges are off by config.
    status: RecallStatus = RecallStatus.OK


@dataclass(frozen=True)
class TokenDelta(Event):
    """A piece of the reply's text."""

    type: ClassVar[str] = "token_delta"
    text: str = ""


@dataclass(frozen=True)
class ToolCall(Event):
    """The model called a tool."""

    type: ClassVar[str] = "tool_call"
    id: str = ""
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult(Event):
    """A tool's answer (``result``) or its failure (``error``: ``{code, message}``)."""

    type: ClassVar[str] = "tool_result"
    id: str = ""
    name: str = ""
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None


@dataclass(frozen=True)
class ApprovalRequired(Event):
    """A call to a tool with ``approval = "required"``: the turn pauses until an owner decides
    (``agentd approvals approve|deny ID``, ``POST /v1/approvals/{id}``), then resumes."""

    type: ClassVar[str] = "approval_required"
    id: int = 0
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    #: Who started the turn (whose rights the call has).
    asked_by: str = ""
    persona: str = ""
    channel: str = ""
    user_message_id: int = 0
    #: When it is denied if nobody decides (ISO 8601, UTC).
    expires_at: str = ""


@dataclass(frozen=True)
class Called:
    """A persona of a room called on to answer next: its stored message (``message_id``), and the
    persona-to-persona replies before it since the person's message (``hop``; 0: it answers the
    person's message too)."""

    persona: str
    message_id: int
    hop: int = 0


@dataclass(frozen=True)
class Done(Event):
    """The reply is complete and stored as ``message_id``; in a room, ``triggered`` are the personas
    it called on, stored with it (each answers next, in order)."""

    type: ClassVar[str] = "done"
    message_id: int = 0
    user_message_id: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    triggered: tuple[Called, ...] = ()


@dataclass(frozen=True)
class Triggered(Event):
    """In a room, who answers a person's message (decided when it was stored): ``persona`` streams
    its reply here; ``triggered`` answer it after, in order (their replies reach the channel's
    feed). ``persona`` empty: nobody is asked to (``require_mention`` and no name)."""

    type: ClassVar[str] = "triggered"
    persona: str = ""
    triggered: tuple[str, ...] = ()
    user_message_id: int = 0


@dataclass(frozen=True)
class PersonaTurnsStopped(Event):
    """A reply in a room named ``personas`` but the chain had reached ``[channels.NAME]
    max_persona_turns`` persona-to-persona replies since the person's message: they do not answer
    (sent before the reply's ``done``)."""

    type: ClassVar[str] = "persona_turns_stopped"
    personas: tuple[str, ...] = ()
    max_persona_turns: int = 0
    user_message_id: int = 0


@dataclass(frozen=True)
class Error(Event):
    """The turn ended without a complete reply; the user message stays stored."""

    type: ClassVar[str] = "error"
    code: ErrorCode = ErrorCode.INTERNAL_ERROR
    message: str = ""
    user_message_id: int | None = None
    #: The partial reply stored as ``interrupted``, if any.
    message_id: int | None = None
    #: ``budget_exceeded``: the cap reached (``persona:NAME:max_tokens_per_day``,
    #: ``persona:NAME:max_cost_usd_per_day`` or ``user:ID:max_tokens_per_day``) ...
    cap: str | None = None
    #: ... and when it resets (ISO time, the next 00:00 UTC). Added after ``message_id``.
    resets_at: str | None = None
    #: In a room, the persona queued after this one for the same message, stored with the outcome
    #: (it answers it all the same).
    triggered: tuple[Called, ...] = ()


_TYPES: dict[str, type[Event]] = {
    k.type: k
    for k in (
        MemoryContext,
        HistoryContext,
        TokenDelta,
        ToolCall,
        ToolResult,
        ApprovalRequired,
        Done,
        Error,
        PersonaTurnsStopped,
    )
}


def event_from_json(data: dict[str, Any]) -> Event:
    """The event ``as_json()`` described (how another daemon's events arrive: see ``runtime.cluster``)."""
    kind = _TYPES[str(data["type"])]
    names = {f.name for f in dataclass_fields(kind)}
    fields = {k: v for k, v in data.items() if k in names}
    if kind is MemoryContext:
        fields["memories"] = tuple(MemorySnippet(**m) for m in fields.get("memories", ()))
        fields["near_misses"] = tuple(MemorySnippet(**m) for m in fields.get("near_misses", ()))
        fields["status"] = RecallStatus(fields.get("status", "ok"))
    elif kind is HistoryContext:
        fields["snippets"] = tuple(HistorySnippet(**s) for s in fields.get("snippets", ()))
        fields["seeds"] = tuple(fields.get("seeds", ()))
        fields["status"] = RecallStatus(fields.get("status", "ok"))
    elif kind is Done:
        fields["triggered"] = tuple(Called(**t) for t in fields.get("triggered", ()))
    elif kind is PersonaTurnsStopped:
        fields["personas"] = tuple(fields.get("personas", ()))
    elif kind is Error:
        fields["code"] = ErrorCode(fields.get("code", ErrorCode.INTERNAL_ERROR))
        fields["triggered"] = tuple(Called(**t) for t in fields.get("triggered", ()))
    return kind(**fields)
