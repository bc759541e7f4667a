"""The operations' request and result models: what every interface reads and answers.

Plain pydantic models over :mod:`agentd.ops.fields` (and nothing heavier: no store, no embedder),
so a client can import them to read the daemon's answers. The operations that take and give
them are in :mod:`agentd.ops.memory`, :mod:`agentd.ops.users`, :mod:`agentd.ops.schedules`,
:mod:`agentd.ops.approvals` and :mod:`agentd.ops.chat`. A model's class name is its
component's name in the OpenAPI schema: renaming one changes the published schema.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import ConfigDict, Field

from agentd._exceptions import InvalidInput
from agentd.access.scopes import GLOBAL, Scope
from agentd.config import MAX_MESSAGE_CHARS
from agentd.ops.fields import (
    CATEGORY_PATTERN,
    MAX_ID,
    MAX_NAME,
    SCOPE_PATTERN,
    TEXT_PATTERN,
    Identifier,
    Limit,
    Metadata,
    PersonaName,
    Request,
    Result,
    Score,
    Text,
    TokenBudget,
    parse,
)

if TYPE_CHECKING:
    from agentd.store.memories import Memory
    from agentd.store.schedules import Schedule
    from agentd.store.tools import Approval


class ActsFor(Protocol):
    """What an argument model reads of who acts, to become its operation's request
    (:class:`agentd.ops.base.OpContext` is one)."""

    @property
    def user(self) -> str | None:
        """The user the session or conversation acts for."""
        ...

    @property
    def channel(self) -> str | None:
        """The channel of the session or conversation."""
        ...

    @property
    def persona(self) -> str | None:
        """The persona of the session or conversation."""
        ...

    def persona_for(self, named: str | None = None) -> str:
        """The persona a call acts for (see :meth:`agentd.ops.base.OpContext.persona_for`)."""
        ...


#: Most memories one import request may carry.
MAX_IMPORT = 10_000

# -- results: the HTTP bodies, the MCP results, the client's models ------------------------------


class MemoryOut(Result):
    """One stored memory."""

    id: int
    persona: str
    scope: str = Field(description="global | channel:NAME | user:ID")
    category: str
    text: str
    metadata: dict[str, Any]
    created_at: str = Field(description="ISO-8601, UTC.")

    @classmethod
    def of(cls, memory: Memory) -> MemoryOut:
        """From the store's row."""
        return cls.model_validate(memory.as_json())


class MemoryHitOut(Result):
    """One search result: a memory and how well it matches."""

    id: int
    text: str
    category: str
    score: float = Field(description="relevance, time-decayed (its odds scaled by recency): what ranks.")
    relevance: float = Field(description="Calibrated match quality in [0, 1]: what thresholds apply to.")
    created_at: str
    scope: str
    metadata: dict[str, Any]
    persona: str


class SearchResponse(Result):
    """``POST /v1/memory/search``."""

    results: list[MemoryHitOut]
    total_found: int


class KnownFactsResponse(Result):
    """``POST /v1/memory/context``: the published field names, kept exactly."""

    context: str
    memoriesUsed: int  # noqa: N815 - the memory service's published contract
    tokensUsed: int  # noqa: N815
    tokenBudget: int  # noqa: N815


class MemoryAdded(Result):
    """``POST /v1/memories``."""

    memory: MemoryOut
    created: bool = Field(description="False: an identical memory was already stored (answered 200).")


class SkippedItem(Result):
    """An import item that was not stored, and why."""

    index: int
    reason: str


class ImportResponse(Result):
    """``POST /v1/memories/import``."""

    added: int
    duplicates: int
    skipped: list[SkippedItem]
    ids: list[int]


class MemoryList(Result):
    """``GET /v1/memories``."""

    memories: list[MemoryOut]
    total: int


class Forgotten(Result):
    """``DELETE /v1/memories/{id}``."""

    forgotten: MemoryOut


class HistoryEntryOut(Result):
    """One change fact extraction made to a memory, and why."""

    id: int
    memory_id: int
    persona: str
    scope: str
    event: str = Field(description="ADD | UPDATE | DELETE | NONE")
    old_text: str | None = Field(None, description="The text before (UPDATE, DELETE).")
    new_text: str | None = Field(None, description="The text after (ADD, UPDATE; NONE: the text already stored).")
    reason: str
    source_message_id: int | None = Field(None, description="The user message the fact came from.")
    created_at: str


class MemoryHistory(Result):
    """``GET /v1/memories/{id}/history``: how one memory changed, oldest first."""

    memory_id: int
    history: list[HistoryEntryOut]


class RecallItem(Result):
    """One memory ``recall`` brings back: ``{text, category, score, created_at, id}``."""

    text: str
    category: str
    score: float
    created_at: str
    id: int


class RecallResult(Result):
    """What the ``recall`` tool and skill answer: the memories, best first."""

    results: list[RecallItem]
    total_found: int
    message: str | None = Field(None, description="Said when nothing is stored yet.")


# -- requests ------------------------------------------------------------------------------------


class SearchRequest(Request):
    """``POST /v1/memory/search``: the same search as ``/context``, as a result list."""

    query: Text
    user_id: Identifier | None = Field(
        None, alias="userId", description="Include this user's memories (never another user's). Also `user_id`."
    )
    persona: PersonaName | None = Field(None, description="Search this persona's memories (default: every persona).")
    channel: Identifier | None = Field(None, description="Include this channel's memories.")
    limit: Limit | None = Field(None, description="Default: memory.context_candidates (20).")
    min_score: Score | None = Field(
        None,
        alias="minScore",
        description="Least relevance of a result; default none (the top `limit` by score). Also `min_score`.",
    )


class LocalSearch(SearchRequest):
    """``agentd memory search``: a search as a turn would make it. Unset, ``limit`` is
    ``memory.search_results`` and ``min_score`` a turn's thresholds; ``episodes`` adds the earlier
    exchanges indexed as episodes (those of ``channel`` and of the user's direct channels)."""

    episodes: bool = False


class KnownFactsRequest(Request):
    """``POST /v1/memory/context``: the Known Facts block for a user and a query."""

    user_id: Identifier = Field(
        alias="userId", description="Whose memories may be used (plus global and channel ones). Also `user_id`."
    )
    query: Text = Field(description="The current message; memories are ranked by relevance to it.")
    token_budget: TokenBudget | None = Field(
        None, alias="tokenBudget", description="Default 2000 (memory.context_tokens)."
    )
    limit: Limit | None = Field(None, description="Memories considered; default 20 (memory.context_candidates).")
    persona: PersonaName | None = Field(None, description="Default: every persona.")
    channel: Identifier | None = None
    min_score: Score | None = Field(
        None,
        alias="minScore",
        description="Least relevance of a memory; default none (the top `limit` by score). Also `min_score`.",
    )


class AddMemory(Request):
    """``POST /v1/memories``. Scope: ``scope``, or ``user_id`` / ``channel`` as shorthands; default global."""

    model_config = ConfigDict(
        json_schema_extra={
            # At most one way of naming the scope.
            "not": {
                "anyOf": [
                    {"required": ["scope", "userId"]},
                    {"required": ["scope", "channel"]},
                    {"required": ["userId", "channel"]},
                ]
            }
        }
    )

    persona: PersonaName
    text: Text = Field(description="At most memory.max_text_chars characters.")
    category: str = Field("fact", pattern=CATEGORY_PATTERN)
    scope: str | None = Field(None, pattern=SCOPE_PATTERN, description="global | channel:NAME | user:ID")
    user_id: Identifier | None = Field(None, alias="userId", description="Store in this user's scope. Also `user_id`.")
    channel: Identifier | None = None
    metadata: Metadata | None = None
    created_at: str | None = Field(
        None, description="ISO-8601; default now.", json_schema_extra={"format": "date-time"}
    )

    def target(self) -> Scope:
        """The scope it names (one way at most), global when none."""
        given = [x for x in (self.scope, self.user_id, self.channel) if x is not None]
        if len(given) > 1:
            raise InvalidInput("scope", "give only one of scope, user_id, channel")
        if self.user_id is not None:
            return Scope.user(self.user_id)
        if self.channel is not None:
            return Scope.channel(self.channel)
        return Scope.parse(self.scope) if self.scope is not None else GLOBAL


#: One import item as documented (``skip_invalid`` false checks each against it; see :class:`ImportRequest`).
IMPORT_ITEM: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["text"],
    "properties": {
        "text": {"type": "string", "pattern": TEXT_PATTERN},
        "persona": {"type": "string", "minLength": 1},
        "scope": {"type": "string", "pattern": SCOPE_PATTERN},
        "category": {"type": "string", "pattern": CATEGORY_PATTERN},
        "metadata": {"type": "object"},
        "created_at": {"type": "string", "format": "date-time"},
    },
}


def _import_schema(schema: dict[str, Any]) -> None:
    # Items are checked one by one (so skip_invalid can skip the bad ones): with
    # skip_invalid any objects are accepted; without it every item must be valid and
    # name its persona, or the request names one for all.
    strict_items = {"type": "array", "maxItems": MAX_IMPORT, "items": IMPORT_ITEM}
    named = {**IMPORT_ITEM, "required": ["text", "persona"]}
    persona = {"type": "string", "minLength": 1}
    schema["anyOf"] = [
        {"required": ["skip_invalid"], "properties": {"skip_invalid": {"const": True}}},
        {"required": ["persona"], "properties": {"persona": persona, "memories": strict_items}},
        {"properties": {"memories": {**strict_items, "items": named}}},
    ]


class ImportRequest(Request):
    """``POST /v1/memories/import``: a batch, stored in one transaction or not at all."""

    model_config = ConfigDict(json_schema_extra=_import_schema)

    memories: list[Metadata] = Field(
        max_length=MAX_IMPORT,
        description=(
            'Items as in `agentd memory import`: {"text", "persona", "scope", "category", "metadata", "created_at"}.'
        ),
    )
    persona: PersonaName | None = Field(None, description="Persona for items that name none.")
    skip_invalid: bool = Field(False, description="Store the valid items and report the rest (default: refuse all).")


class ListMemories(Request):
    """``GET /v1/memories``' query: a persona's memories, newest first."""

    persona: str = Field(min_length=1, max_length=MAX_NAME, description="Whose memories.")
    scope: str | None = Field(
        None, pattern=SCOPE_PATTERN, description="global | channel:NAME | user:ID (default: all)."
    )
    limit: int = Field(100, ge=1, le=10_000)
    offset: int = Field(0, ge=0, le=MAX_ID)

    def chosen(self) -> Scope | None:
        """The scope listed (``None``: every scope but episodes)."""
        return Scope.parse(self.scope) if self.scope is not None else None


class LocalList(ListMemories):
    """``agentd memory list``: up to 100000 at once, and the episodes of a channel or a user's direct
    channels instead of memories (``episodes_of``: ``channel:NAME`` or ``user:ID``)."""

    limit: int = Field(100, ge=1, le=100_000)
    episodes_of: str | None = Field(None, pattern=SCOPE_PATTERN)

    def chosen(self) -> Scope | None:
        """The scope listed; the episodes' scope with ``episodes_of`` (given alone)."""
        if self.episodes_of is None:
            return super().chosen()
        if self.scope is not None:
            raise InvalidInput("scope", "give --episodes alone, without --channel, --user or --global")
        return Scope.episodes(Scope.parse(self.episodes_of))


class ForgetMemory(Request):
    """Delete one memory by its id (as ``recall`` or ``list_memories`` give it)."""

    id: int = Field(ge=1, le=MAX_ID, description="The memory's id.")


class HistoryRequest(Request):
    """``GET /v1/memories/{id}/history``: one memory's revisions."""

    memory_id: int = Field(ge=1, le=MAX_ID)


# -- the narrower arguments of an MCP session or a conversation --------------------------------


class RememberArgs(Request):
    """``remember``'s arguments (MCP tool, skill): where to store is relative to the caller."""

    text: str = Field(description="The memory, as a short self-contained sentence.")
    category: str = Field("fact", description="preference, fact, decision, ... (default fact).")
    scope: Literal["user", "channel", "global"] | None = Field(
        None,
        description="user: only for this session's user (the default when it has one); channel: for everyone "
        "in this session's channel; global: everywhere.",
    )

    def to_request(self, ctx: ActsFor) -> AddMemory:
        """The ``memory_remember`` request: the caller's persona, the scope resolved against its user and channel."""
        where = self.scope or ("user" if ctx.user else "channel" if ctx.channel else "global")
        if where == "user" and not ctx.user:
            raise InvalidInput("scope", "user needs a user to act for, and this session or conversation has none")
        if where == "channel" and not ctx.channel:
            raise InvalidInput("scope", "channel needs a channel, and this session or conversation has none")
        scope = f"user:{ctx.user}" if where == "user" else f"channel:{ctx.channel}" if where == "channel" else "global"
        given = {"persona": ctx.persona_for(), "text": self.text, "category": self.category, "scope": scope}
        return parse(AddMemory, given)


class RecallQuery(Request):
    """The ``recall`` skill's arguments: the conversation fixes the persona, the user and the channel."""

    query: str = Field(description="What to look for, in plain words.")
    limit: int | None = Field(None, ge=1, le=100, description="At most this many results (default 5).")


class RecallArgs(RecallQuery):
    """The ``recall`` MCP tool's arguments: the session's persona (else every persona), user and channel,
    and a threshold of the caller's own."""

    min_score: float | None = Field(
        None, alias="minScore", ge=0, le=1, description="Leave out results less relevant than this (default: none)."
    )


class ContextArgs(Request):
    """``memory_context``'s arguments (MCP tool): the session's user, channel and persona."""

    query: str = Field(description="What the context is for.")
    token_budget: int | None = Field(
        None, alias="tokenBudget", ge=1, le=100_000, description="The most tokens the block may take (default 2000)."
    )
    limit: int | None = Field(None, ge=1, le=1000, description="At most this many memories considered (default 20).")

    def to_request(self, ctx: ActsFor) -> KnownFactsRequest:
        """The ``memory_context`` request for the caller's user (which it must have)."""
        if not ctx.user:
            raise InvalidInput("user", "memory_context needs a user to act for, and this session has none")
        return parse(
            KnownFactsRequest,
            {
                "userId": ctx.user,
                "query": self.query,
                "tokenBudget": self.token_budget,
                "limit": self.limit,
                "persona": ctx.persona,
                "channel": ctx.channel,
            },
        )


class ListArgs(Request):
    """``list_memories``' arguments (MCP tool): the session's persona."""

    scope: str | None = Field(None, description="Only this scope: global, channel:NAME or user:ID (default: all).")
    limit: int | None = Field(None, ge=1, le=10_000, description="Default 100.")
    offset: int | None = Field(None, ge=0, description="Skip this many (default 0).")

    def to_request(self, ctx: ActsFor) -> ListMemories:
        """The ``memory_list`` request for the caller's persona."""
        given = {"scope": self.scope, "limit": self.limit, "offset": self.offset}
        return parse(ListMemories, {"persona": ctx.persona_for(), **{k: v for k, v in given.items() if v is not None}})


# -- a person's data -----------------------------------------------------------------------------


class UserRequest(Request):
    """Whose data, and of which persona (default: every persona)."""

    user: str = Field(description="The user's id.")
    persona: str | None = Field(
        None, min_length=1, max_length=MAX_NAME, description="Only this persona's (default: every persona)."
    )


class UserExport(Result):
    """``GET /v1/users/{user}/export``: everything kept about a user (rows as stored, times in UTC)."""

    user: str
    persona: str | None
    memories: list[dict[str, Any]] = Field(description="Their memories, each with its ``history``.")
    episodes: list[dict[str, Any]] = Field(description="Their exchanges kept as episodes, each with its ``history``.")
    messages: list[dict[str, Any]] = Field(description="The messages they wrote.")
    replies: list[dict[str, Any]] = Field(description="The replies to those messages.")
    context_records: list[dict[str, Any]] = Field(description="What each of those replies was given.")
    tool_calls: list[dict[str, Any]] = Field(default_factory=list, description="The tool calls they triggered.")
    approvals: list[dict[str, Any]] = Field(
        default_factory=list, description="The approvals their tool calls asked for (with the paused conversation)."
    )
    schedules: list[dict[str, Any]] = Field(default_factory=list, description="The schedules made for them.")


class UserForgotten(Result):
    """``DELETE /v1/users/{user}``: what was erased (counts only)."""

    user: str
    persona: str | None
    messages: int
    memories: int
    episodes: int
    context_records: int
    memory_history: int
    tool_calls: int = Field(default=0, description="Tool calls they triggered (with their approvals).")
    schedules: int = Field(default=0, description="Their schedules (their firings' messages are among the messages).")
    redacted: dict[str, int] = Field(description="Quotes of the user replaced elsewhere, by kind of row.")
    channels: list[str] = Field(description="The channels their messages were erased from.")
    wal_kept: bool = Field(description="SQLite: a reader kept the WAL from being truncated (the next checkpoint does).")
    remaining: dict[str, int] = Field(
        description="SQLite: copies of the user's texts still found in the database files after the erasure, "
        "by file (counted in their bytes; empty: none)."
    )
    vacuumed: bool = Field(description="SQLite: the database was rebuilt (VACUUM) to remove copies left in its pages.")
    until_vacuum: str | None = Field(
        description="PostgreSQL: what the server keeps until its own vacuum, and what the operator can run."
    )


# -- schedules (:mod:`agentd.ops.schedules`) ------------------------------------------------------


#: A schedule's state.
ScheduleState = Literal["scheduled", "fired", "missed", "cancelled"]
#: The longest ``in_minutes`` a reminder may be set for (a year).
MAX_MINUTES = 366 * 24 * 60
#: The most schedules a persona's ``list_schedules`` shows.
TOOL_LIST_LIMIT = 50


class NewScheduleBody(Request):
    """``POST /v1/schedules``: ``at`` (one time) or ``cron`` (a recurrence), exactly one."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["at"]}, {"required": ["cron"]}]})

    persona: PersonaName
    channel: Identifier
    user: Identifier | None = Field(
        default=None, description="Whose memories its firings recall; a service key must name one."
    )
    text: Text = Field(description="What the persona is told when it fires (its turn's trigger message).")
    # ``str`` with no value, not ``str | None``: absent, never null (the schema's oneOf counts a key
    # as given, so a null would be one given); hence the ignores.
    at: str = Field(  # type: ignore[assignment]
        None,
        description="ISO 8601 with an offset, in the future (e.g. 2026-11-28T09:00:00+01:00).",
        json_schema_extra={"format": "date-time"},
    )
    cron: str = Field(default=None, max_length=128, description="Five fields: minute hour day month weekday.")  # type: ignore[assignment]
    timezone: str | None = Field(default=None, max_length=64, description="IANA name for cron (default UTC).")


class ScheduleOut(Result):
    """One schedule."""

    id: int
    persona: str
    channel: str
    user: str | None
    text: str
    at: str | None
    cron: str | None
    timezone: str | None
    next_at: str | None = Field(description="When it is next due (null once fired, missed or cancelled).")
    state: str = Field(description="scheduled | fired | missed | cancelled")
    created_by: str
    created_at: str
    last_fired_at: str | None
    fired_count: int
    last_message_id: int | None = Field(description="The trigger message of its last firing.")
    routine: str | None = Field(description="The persona file's [[routines]] entry it mirrors.")

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleOut:
        """The stored schedule, as every interface shows it."""
        return cls.model_validate(schedule.as_json())


class ScheduleList(Result):
    """``GET /v1/schedules``: newest first."""

    schedules: list[ScheduleOut]


class ScheduleQuery(Request):
    """Which schedules to list (every filter optional; a caller that is not an admin: its user's)."""

    state: ScheduleState | None = Field(default=None, description="Only those in this state.")
    persona: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)
    user: Identifier | None = Field(default=None, description="Only this user's.")
    limit: int = Field(200, ge=1, le=10_000)


class ScheduleRef(Request):
    """One schedule, by id (``user``: the user a caller that is not an admin acts for)."""

    id: int = Field(ge=1, le=MAX_ID, description="The schedule's id.")
    user: Identifier | None = None


# -- the model's tools: what a persona may say (the conversation gives the rest) -------------------


class ScheduleArgs(Request):
    """``schedule``: a reminder at one time (``at`` or ``in_minutes``) or a recurrence (``cron``)."""

    text: Text = Field(description="What to do or say then, e.g. 'Remind alice to stretch'.")
    in_minutes: float | None = Field(default=None, gt=0, le=MAX_MINUTES, description="Minutes from now (one time).")
    at: str | None = Field(default=None, description="ISO 8601 time with an offset (one time).")
    cron: str | None = Field(
        default=None, max_length=128, description="Five-field cron: minute hour day month weekday."
    )
    timezone: str | None = Field(default=None, max_length=64, description="IANA timezone of cron (default UTC).")

    def to_request(self, ctx: ActsFor) -> NewScheduleBody:
        """The schedule to make, in the conversation of ``ctx`` (its persona, channel and user)."""
        at = self.at
        if self.in_minutes is not None:
            if at is not None:
                raise InvalidInput("in_minutes", "give at or in_minutes, not both")
            at = (datetime.now(UTC) + timedelta(minutes=self.in_minutes)).isoformat()
        given = {"persona": ctx.persona, "channel": ctx.channel, "text": self.text, "at": at, "cron": self.cron}
        fields = {k: v for k, v in given.items() if v is not None}
        return parse(NewScheduleBody, {**fields, "timezone": self.timezone})


class ListSchedulesArgs(Request):
    """``list_schedules``: the conversation user's schedules."""

    state: ScheduleState | None = None

    def to_request(self) -> ScheduleQuery:
        """The query (at most :data:`TOOL_LIST_LIMIT`)."""
        return ScheduleQuery(state=self.state, limit=TOOL_LIST_LIMIT)


class CancelScheduleArgs(Request):
    """``cancel_schedule``: one of the conversation user's schedules."""

    id: int = Field(ge=1, le=MAX_ID, description="The schedule's id.")

    def to_request(self) -> ScheduleRef:
        """The schedule to cancel."""
        return ScheduleRef(id=self.id)


# -- approvals (:mod:`agentd.ops.approvals`) ------------------------------------------------------


#: An approval's state.
ApprovalState = Literal["pending", "approved", "denied", "expired"]


class ApprovalOut(Result):
    """One tool call waiting for (or given) an owner's decision."""

    id: int
    persona: str
    channel: str
    message_id: int = Field(description="The user message whose turn waits.")
    tool: str
    arguments: Any = Field(description="The call's arguments, as the model sent them.")
    asked_by: str = Field(description="Who started the turn (whose rights the call has).")
    state: ApprovalState
    decided_by: str | None
    reason: str | None
    created_at: str
    expires_at: str = Field(description="When it is denied if nobody decides.")
    decided_at: str | None

    @classmethod
    def of(cls, approval: Approval) -> ApprovalOut:
        """The stored approval, as every interface shows it."""
        return cls.model_validate(approval.as_json())


class ApprovalList(Result):
    """``GET /v1/approvals``."""

    approvals: list[ApprovalOut]


class ApprovalQuery(Request):
    """Which approvals to list (``state`` ``None``: every state)."""

    state: ApprovalState | None = "pending"
    persona: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)
    limit: int = Field(default=1000, ge=1, le=10_000)


class DecisionIn(Request):
    """``POST /v1/approvals/{id}``: the decision."""

    decision: Literal["approve", "deny"]
    reason: str | None = Field(default=None, max_length=2000, description="Why (the model, and the person, are told).")
    user: Identifier | None = Field(
        default=None,
        description="The owner deciding (required for a key that is not an admin's: one of the persona's owners).",
    )

    def to_request(self, approval_id: int) -> ApprovalDecision:
        """The decision on approval ``approval_id``."""
        return ApprovalDecision(id=approval_id, decision=self.decision, reason=self.reason, user=self.user)


class ApprovalDecision(DecisionIn):
    """The decision on approval ``id``."""

    id: int = Field(ge=1, le=MAX_ID, description="The approval's id.")


# -- chat (:mod:`agentd.ops.chat`) ----------------------------------------------------------------


#: Who reads a channel: ``direct`` (this user and the persona) or ``shared``.
Visibility = Literal["direct", "shared"]
VISIBILITY_FIELD = Field(
    default=None,
    description="Who reads the channel: 'direct' (only this user and the persona) or 'shared' (the default). "
    "The channel's first message that says so decides; [channels.NAME] visibility in the config wins.",
)


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

    def to_request(self, channel: str) -> ChatRequest:
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


class ChatArgs(Request):
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

    def to_request(self, ctx: ActsFor) -> ChatRequest:
        """The chat of the session's user (which the session must have): in the user's own channel
        ``dm-USER`` unless one is given (there what this session stored, scope user, is recalled)."""
        if not ctx.user:
            raise InvalidInput("user", "chat needs a user to act for, and this session has none")
        own = f"dm-{ctx.user}"
        channel = self.channel or ctx.channel or own
        given = {
            "persona": ctx.persona_for(self.persona),
            "channel": channel,
            "user": ctx.user,
            "message": self.message,
        }
        visibility = self.visibility or ("direct" if channel == own else None)
        return parse(ChatRequest, {**given, "visibility": visibility})


class ChatAccepted(Result):
    """A stored message and the request that answers it."""

    message_id: int
    request_id: str
    persona: str = Field(description="Who answers first ('': nobody was asked to, in a room).")
    channel: str
    also: list[str] = Field(default_factory=list, description="In a room, who answers after it, in order.")
