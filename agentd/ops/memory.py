"""The memory operations: remember, recall, search, context, list, forget, history, import.

Each is one function over :class:`~agentd.ops.base.OpContext` (see :mod:`agentd.ops.base` for the
conventions), reached by ``/v1/memory*`` and ``/v1/memories*`` (:mod:`agentd.api.memory_routes`),
the MCP tools (:mod:`agentd.mcpserver.tools`), the ``remember`` and ``recall`` skills
(:mod:`agentd.skills.memory`) and ``agentd memory …`` (:mod:`agentd.cli.memory`).

Who may call what: searching (``memory_search``, ``memory_context``, ``memory_recall``) admits
admin and service keys; changing or listing memories admin keys; a persona's own tool calls may
remember and recall within its conversation. Where the caller says less than the HTTP body would
(an MCP session or a conversation fixes the persona, the user and the channel), a narrower
argument model (:class:`RememberArgs`, :class:`ContextArgs`, :class:`ListArgs`) is the tool's
input schema and turns into the operation's request with ``to_request(ctx)``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import ConfigDict, Field

from agentd._exceptions import InvalidInput, NotFound
from agentd.memory.importer import parse_line, parse_timestamp
from agentd.memory.ranking import MemoryHit
from agentd.ops.base import ADMIN, PERSONA, SERVICE, OpContext, Request, Result, operation, parse
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
    Score,
    Text,
    TokenBudget,
)
from agentd.recall import known_facts
from agentd.scopes import GLOBAL, Reach, Scope
from agentd.store.memories import Memory, NewMemory

#: Most memories one import request may carry.
MAX_IMPORT = 10_000
#: The roles that may search memories, and those that may change or list them.
SEARCHERS = (ADMIN, SERVICE)
KEEPERS = (ADMIN,)

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

    @classmethod
    def of(cls, hit: MemoryHit) -> MemoryHitOut:
        """From a search's hit."""
        return cls.model_validate({**hit.as_result(), "persona": hit.memory.persona})


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


class RecalledMemory(Result):
    """One memory ``recall`` brings back: ``{text, category, score, created_at, id}``."""

    text: str
    category: str
    score: float
    created_at: str
    id: int


class RecallResult(Result):
    """What the ``recall`` tool and skill answer: the memories, best first."""

    results: list[RecalledMemory]
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
    limit: Limit | None = Field(None, description="Default: memory.limit (20).")
    min_score: Score | None = Field(
        None,
        alias="minScore",
        description="Least relevance of a result; default none (the top `limit` by score). Also `min_score`.",
    )


class LocalSearch(SearchRequest):
    """``agentd memory search``: a search as a turn would make it. Unset, ``limit`` is
    ``memory.recall_limit`` and ``min_score`` a turn's thresholds; ``episodes`` adds the earlier
    exchanges indexed as episodes (those of ``channel`` and of the user's direct channels)."""

    episodes: bool = False


class KnownFactsRequest(Request):
    """``POST /v1/memory/context``: the Known Facts block for a user and a query."""

    user_id: Identifier = Field(
        alias="userId", description="Whose memories may be used (plus global and channel ones). Also `user_id`."
    )
    query: Text = Field(description="The current message; memories are ranked by relevance to it.")
    token_budget: TokenBudget | None = Field(
        None, alias="tokenBudget", description="Default 2000 (memory.token_budget)."
    )
    limit: Limit | None = Field(None, description="Memories considered; default 20 (memory.limit).")
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

    def to_request(self, ctx: OpContext) -> AddMemory:
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

    def to_request(self, ctx: OpContext) -> KnownFactsRequest:
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

    def to_request(self, ctx: OpContext) -> ListMemories:
        """The ``memory_list`` request for the caller's persona."""
        given = {"scope": self.scope, "limit": self.limit, "offset": self.offset}
        return parse(ListMemories, {"persona": ctx.persona_for(), **{k: v for k, v in given.items() if v is not None}})


# -- the operations ------------------------------------------------------------------------------


def _check_length(ctx: OpContext, field: str, text: object) -> None:
    """The published limit (memory.max_text_chars) applies to the text as sent."""
    limit = ctx.parts.memory.config.max_text_chars
    if isinstance(text, str) and len(text) > limit:
        raise InvalidInput(field, f"is {len(text)} characters; the limit is {limit} (memory.max_text_chars)")


def _searched(ctx: OpContext, persona: str | None) -> list[str]:
    """The personas a search covers: the one named, else the caller's, else every one."""
    if persona:
        return [ctx.persona_for(persona)]
    return [ctx.persona] if ctx.persona else list(ctx.parts.personas)


@operation("memory_search", roles=SEARCHERS)
def search(ctx: OpContext, request: SearchRequest) -> SearchResponse:
    """The top ``limit`` memories by relevance with time decay, best first (``score`` ranks;
    ``min_score``, default none, filters on ``relevance``)."""
    memory = ctx.parts.memory
    if isinstance(request, LocalSearch):
        reach = Reach(ctx.persona_for(request.persona), request.channel, request.user_id or ctx.user)
        scopes = [*reach.scopes(), *reach.episode_scopes(direct=True)] if request.episodes else None
        hits = memory.search(request.query, reach, limit=request.limit, min_relevance=request.min_score, scopes=scopes)
    else:
        hits = known_facts.search(
            memory,
            request.query,
            _searched(ctx, request.persona),
            user=request.user_id,
            channel=request.channel,
            limit=request.limit or memory.config.limit,
            min_relevance=request.min_score or 0.0,
        )
    return SearchResponse(results=[MemoryHitOut.of(h) for h in hits], total_found=len(hits))


def _threshold(request: RecallQuery, configured: float | None) -> float:
    """The request's ``min_score``, else ``memory.recall_min_score``, else none (0)."""
    given = request.min_score if isinstance(request, RecallArgs) else None
    return given if given is not None else configured or 0.0


@operation("memory_recall", roles=(*SEARCHERS, PERSONA))
def recall(ctx: OpContext, request: RecallQuery) -> RecallResult:
    """The memories the caller's conversation may see (global, its channel's, its user's own), best
    first: ``limit`` default ``memory.recall_limit``, threshold ``min_score`` default
    ``memory.recall_min_score`` (unset: none)."""
    if not request.query.strip():
        raise InvalidInput("query", "must be a non-empty string")
    memory = ctx.parts.memory
    config = memory.config
    hits = known_facts.search(
        memory,
        request.query,
        _searched(ctx, None),
        user=ctx.user,
        channel=ctx.channel,
        limit=request.limit or config.recall_limit,
        min_relevance=_threshold(request, config.recall_min_score),
        shared_channel=ctx.shared_channel,
    )
    found = [RecalledMemory.model_validate({**h.as_recall_result(), "id": h.memory.id}) for h in hits]
    nothing = not hits and ctx.persona is not None and memory.count(ctx.persona) == 0
    return RecallResult(results=found, total_found=len(hits), message="no memories are stored yet" if nothing else None)


@operation("memory_context", roles=SEARCHERS)
def context(ctx: OpContext, request: KnownFactsRequest) -> KnownFactsResponse:
    """The ``## Known Facts (from memory)`` block for a query, within a token budget.

    Defaults: ``token_budget`` 2000, ``limit`` 20, no threshold (``min_score`` sets one). The top
    ``limit`` memories by score are taken best first until the next one would not fit.
    """
    memory = ctx.parts.memory
    personas = _searched(ctx, request.persona)
    hits = known_facts.search(
        memory,
        request.query,
        personas,
        user=request.user_id,
        channel=request.channel,
        limit=request.limit or memory.config.limit,
        min_relevance=request.min_score or 0.0,
    )
    counters = {c.name: c for c in (ctx.parts.token_counter(ctx.parts.personas[p]) for p in personas)}
    count = lambda text: max((c.count(text) for c in counters.values()), default=0)  # noqa: E731 - fits any of them
    block = known_facts.known_facts(hits, request.token_budget or memory.config.token_budget, count)
    return KnownFactsResponse.model_validate(block.as_json())


@operation("memory_remember", roles=(*KEEPERS, PERSONA))
def remember(ctx: OpContext, request: AddMemory) -> MemoryAdded:
    """Store a memory, or find the identical one already stored (``created`` false)."""
    _check_length(ctx, "text", request.text)
    created_at = parse_timestamp(request.created_at) if request.created_at is not None else None
    memory, created = ctx.parts.memory.add(
        request.persona,
        request.target(),
        request.text,
        request.category,
        request.metadata,
        created_at=created_at,
        source_message_id=ctx.message_id,
    )
    return MemoryAdded(memory=MemoryOut.of(memory), created=created)


@operation("memory_import", roles=KEEPERS)
def import_batch(ctx: OpContext, request: ImportRequest) -> ImportResponse:
    """Store a batch in one transaction. An invalid item refuses the whole batch (naming
    ``memories[i].field``) unless ``skip_invalid``, which stores the rest and reports it."""
    memory = ctx.parts.memory
    if request.persona is not None:
        memory.check_persona(request.persona)
    valid: list[NewMemory] = []
    skipped: list[SkippedItem] = []
    for index, item in enumerate(request.memories):
        try:
            _check_length(ctx, "text", item.get("text"))
            valid.append(parse_line(json.dumps(item), request.persona, memory.validate))
        except (InvalidInput, NotFound) as exc:
            if not request.skip_invalid:
                if isinstance(exc, NotFound):  # an unknown persona is a 404, as everywhere
                    raise NotFound(exc.kind, exc.name, f"in memories[{index}]") from None
                raise InvalidInput(f"memories[{index}].{exc.field}", str(exc)) from None
            skipped.append(SkippedItem(index=index, reason=str(exc)))
    results = memory.add_many(valid) if valid else []
    added = sum(1 for _id, created in results if created)
    return ImportResponse(
        added=added, duplicates=len(results) - added, skipped=skipped, ids=[mid for mid, _created in results]
    )


@operation("memory_list", roles=KEEPERS)
def list_memories(ctx: OpContext, request: ListMemories) -> MemoryList:
    """A persona's memories, newest first, and how many it has."""
    memory = ctx.parts.memory
    found = memory.list_memories(request.persona, request.chosen(), request.limit, request.offset)
    return MemoryList(memories=[MemoryOut.of(m) for m in found], total=memory.count(request.persona))


@operation("memory_forget", roles=KEEPERS)
def forget(ctx: OpContext, request: ForgetMemory) -> Forgotten:
    """Delete one memory (its row, vector and index entry)."""
    return Forgotten(forgotten=MemoryOut.of(ctx.parts.memory.forget(request.id)))


@operation("memory_history", roles=KEEPERS)
def history(ctx: OpContext, request: HistoryRequest) -> MemoryHistory:
    """How a memory changed through fact extraction, oldest first; also for a memory since deleted."""
    entries = ctx.parts.memory.revisions(request.memory_id)
    return MemoryHistory(
        memory_id=request.memory_id, history=[HistoryEntryOut.model_validate(e.as_json()) for e in entries]
    )


__all__ = [
    "AddMemory",
    "ContextArgs",
    "ForgetMemory",
    "Forgotten",
    "HistoryEntryOut",
    "HistoryRequest",
    "ImportRequest",
    "ImportResponse",
    "KnownFactsRequest",
    "KnownFactsResponse",
    "ListArgs",
    "ListMemories",
    "LocalList",
    "LocalSearch",
    "MemoryAdded",
    "MemoryHistory",
    "MemoryHitOut",
    "MemoryList",
    "MemoryOut",
    "RecallArgs",
    "RecallQuery",
    "RecallResult",
    "RecalledMemory",
    "RememberArgs",
    "SearchRequest",
    "SearchResponse",
    "SkippedItem",
]
