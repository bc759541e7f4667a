"""The memory operations: remember, recall, search, context, list, forget, history, import.

Each is one function over :class:`~agentd.ops.base.OpContext` (see :mod:`agentd.ops.base` for the
conventions), reached by ``/v1/memory*`` and ``/v1/memories*`` (:mod:`agentd.api.memory_routes`),
the MCP tools (:mod:`agentd.mcp.server.tools`), the ``remember`` and ``recall`` skills
(:mod:`agentd.skills.memory`) and ``agentd memory …`` (:mod:`agentd.cli.memory`).

Who may call what: searching (``memory_search``, ``memory_context``, ``memory_recall``) admits
admin and service keys; changing or listing memories admin keys; a persona's own tool calls may
remember and recall within its conversation. Where the caller says less than the HTTP body would
(an MCP session or a conversation fixes the persona, the user and the channel), a narrower
argument model (:class:`RememberArgs`, :class:`ContextArgs`, :class:`ListArgs`) is the tool's
input schema and turns into the operation's request with ``to_request(ctx)``. The models are in
:mod:`agentd.ops.models` (re-exported here).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from agentd._exceptions import InvalidInput, NotFound
from agentd.access.scopes import Reach
from agentd.ops.base import ADMIN, PERSONA, SERVICE, OpContext, operation
from agentd.ops.models import (
    IMPORT_ITEM,
    MAX_IMPORT,
    AddMemory,
    ContextArgs,
    ForgetMemory,
    Forgotten,
    HistoryEntryOut,
    HistoryRequest,
    ImportRequest,
    ImportResponse,
    KnownFactsRequest,
    KnownFactsResponse,
    ListArgs,
    ListMemories,
    LocalList,
    LocalSearch,
    MemoryAdded,
    MemoryHistory,
    MemoryHitOut,
    MemoryList,
    MemoryOut,
    RecallArgs,
    RecallItem,
    RecallQuery,
    RecallResult,
    RememberArgs,
    SearchRequest,
    SearchResponse,
    SkippedItem,
)

if TYPE_CHECKING:
    from agentd.search import MemoryHit
    from agentd.store.memories import NewMemory

#: The roles that may search memories, and those that may change or list them.
SEARCHERS = (ADMIN, SERVICE)
KEEPERS = (ADMIN,)


# -- the operations ------------------------------------------------------------------------------


def _check_length(ctx: OpContext, field: str, text: object) -> None:
    """The published limit (memory.max_text_chars) applies to the text as sent."""
    limit = ctx.parts.memory.config.max_text_chars
    if isinstance(text, str) and len(text) > limit:
        raise InvalidInput(field, f"is {len(text)} characters; the limit is {limit} (memory.max_text_chars)")


def _hit(hit: MemoryHit) -> MemoryHitOut:
    """A search's hit as a result."""
    return MemoryHitOut.model_validate({**hit.as_result(), "persona": hit.memory.persona})


def _searched(ctx: OpContext, persona: str | None) -> list[str]:
    """The personas a search covers: the one named, else the caller's, else every one."""
    if persona:
        return [ctx.persona_for(persona)]
    return [ctx.persona] if ctx.persona else list(ctx.parts.personas)


@operation("memory_search", roles=SEARCHERS)
def search(ctx: OpContext, request: SearchRequest) -> SearchResponse:
    """The top ``limit`` memories by relevance with time decay, best first (``score`` ranks;
    ``min_score``, default none, filters on ``relevance``)."""
    # On first use: the search machinery is heavy to import (agentd memory list needs none of it).
    from agentd.recall import known_facts
    from agentd.search import SearchQuery

    memory = ctx.parts.memory
    if isinstance(request, LocalSearch):
        reach = Reach(ctx.persona_for(request.persona), request.channel, request.user_id or ctx.user)
        scopes = [*reach.scopes(), *reach.episode_scopes(direct=True)] if request.episodes else None
        asked = SearchQuery(request.query, reach, request.limit, min_relevance=request.min_score, scopes=scopes)
        hits = list(memory.search(asked).hits)
    else:
        hits = known_facts.search(
            memory,
            request.query,
            _searched(ctx, request.persona),
            user=request.user_id,
            channel=request.channel,
            limit=request.limit or memory.config.context_candidates,
            min_relevance=request.min_score or 0.0,
        )
    return SearchResponse(results=[_hit(h) for h in hits], total_found=len(hits))


def _threshold(request: RecallQuery, configured: float | None) -> float:
    """The MCP tool's ``minScore`` (default none, as its schema says); the skill's
    ``memory.search_min_score`` (default none)."""
    if isinstance(request, RecallArgs):
        return request.min_score or 0.0
    return configured or 0.0


@operation("memory_recall", roles=(*SEARCHERS, PERSONA))
def recall(ctx: OpContext, request: RecallQuery) -> RecallResult:
    """The memories the caller's conversation may see (global, its channel's, its user's own), best
    first: ``limit`` default ``memory.search_results``; the threshold is the MCP tool's ``minScore``,
    the skill's ``memory.search_min_score`` (either unset: none)."""
    from agentd.recall import known_facts

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
        limit=request.limit or config.search_results,
        min_relevance=_threshold(request, config.search_min_score),
        shared_channel=ctx.shared_channel,
    )
    found = [RecallItem.model_validate({**h.as_recall_result(), "id": h.memory.id}) for h in hits]
    nothing = not hits and ctx.persona is not None and memory.count(ctx.persona) == 0
    return RecallResult(results=found, total_found=len(hits), message="no memories are stored yet" if nothing else None)


@operation("memory_context", roles=SEARCHERS)
def context(ctx: OpContext, request: KnownFactsRequest) -> KnownFactsResponse:
    """The ``## Known Facts (from memory)`` block for a query, within a token budget.

    Defaults: ``token_budget`` 2000, ``limit`` 20, no threshold (``min_score`` sets one). The top
    ``limit`` memories by score are taken best first until the next one would not fit.
    """
    from agentd.recall import known_facts

    memory = ctx.parts.memory
    personas = _searched(ctx, request.persona)
    hits = known_facts.search(
        memory,
        request.query,
        personas,
        user=request.user_id,
        channel=request.channel,
        limit=request.limit or memory.config.context_candidates,
        min_relevance=request.min_score or 0.0,
    )
    counters = {c.name: c for c in (ctx.parts.token_counter(ctx.parts.personas[p]) for p in personas)}
    count = lambda text: max((c.count(text) for c in counters.values()), default=0)  # noqa: E731 - fits any of them
    block = known_facts.known_facts(hits, request.token_budget or memory.config.context_tokens, count)
    return KnownFactsResponse.model_validate(block.as_json())


@operation("memory_remember", roles=(*KEEPERS, PERSONA))
def remember(ctx: OpContext, request: AddMemory) -> MemoryAdded:
    """Store a memory, or find the identical one already stored (``created`` false)."""
    from agentd.memory.importer import parse_timestamp

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
    from agentd.memory.importer import parse_line

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
    "IMPORT_ITEM",
    "ImportRequest",
    "ImportResponse",
    "KnownFactsRequest",
    "KnownFactsResponse",
    "ListArgs",
    "ListMemories",
    "LocalList",
    "LocalSearch",
    "MAX_IMPORT",
    "MemoryAdded",
    "MemoryHistory",
    "MemoryHitOut",
    "MemoryList",
    "MemoryOut",
    "RecallArgs",
    "RecallQuery",
    "RecallResult",
    "RecallItem",
    "RememberArgs",
    "SearchRequest",
    "SearchResponse",
    "SkippedItem",
]
