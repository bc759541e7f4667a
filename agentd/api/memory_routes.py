"""The memory service over HTTP: search, context, add, import, list, forget.

``/v1/memory/search`` and ``/v1/memory/context`` share one search function
(:func:`agentd.recall.known_facts.search`, over :meth:`MemoryService.search`).
Embedding and SQLite calls block, so the routes hand their work to the daemon's
embedding threads (:meth:`Daemon.embedding_work`), off the event loop and apart
from the threads the rest of the API uses. Every embedder call is bounded in
time: a hung model answers 504 ``embedder_timeout``, a failing one 503
``embedder_unavailable``, a broken answer 502 ``embedder_bad_output``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse
from starlette.convertors import Convertor, register_url_convertor

from agentd._exceptions import InvalidInput, NotFound
from agentd.access.scopes import GLOBAL, Scope, check_identifier
from agentd.api.roles import Policy, allow
from agentd.api.schemas import (
    MAX_ID,
    MAX_NAME,
    SCOPE_PATTERN,
    AddMemory,
    ImportRequest,
    KnownFactsRequest,
    SearchRequest,
)
from agentd.api.state import Daemon, daemon
from agentd.memory.importer import parse_line, parse_timestamp
from agentd.recall import known_facts
from agentd.schemas.responses import (
    COMMON_ERRORS,
    Forgotten,
    ImportResponse,
    KnownFactsResponse,
    MemoryAdded,
    MemoryHistory,
    MemoryList,
    SearchResponse,
    error_responses,
)
from agentd.store.memories import NewMemory

router = APIRouter(tags=["memory"], responses=COMMON_ERRORS)


class _Id(Convertor[str]):
    """A path segment that can be a memory's id: a number (a negative or huge one is refused by the
    route, naming the field). A word is not an id, so ``/v1/memories/import`` is not a memory's path
    and ``DELETE`` there is 405 with ``Allow: POST``, not 422."""

    regex = "-?[0-9]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return str(value)


register_url_convertor("agentd_id", _Id())  # Starlette's registry is global: a name of our own

#: What a route that embeds may answer besides the common errors.
EMBEDDER_ERRORS = error_responses(404, 409, 422, 502, 504)


def _check_length(field: str, text: object, d: Daemon) -> None:
    """The published limit (memory.max_text_chars) applies to the text as sent."""
    limit = d.app.config.memory.max_text_chars
    if isinstance(text, str) and len(text) > limit:
        raise InvalidInput(field, f"is {len(text)} characters; the limit is {limit} (memory.max_text_chars)")


def _personas(d: Daemon, persona: str | None) -> list[str]:
    if persona is None:
        return list(d.app.personas)
    return [d.app.personas[persona].name]


def _check_optional(field: str, value: str | None) -> None:
    if value is not None:
        check_identifier(field, value)


def _count(d: Daemon, personas: list[str]) -> Any:
    """The largest count among the searched personas' tokenizers (the block fits any of them)."""
    counters = {c.name: c for c in (d.app.builder.counter(d.app.personas[p]) for p in personas)}
    return lambda text: max((c.count(text) for c in counters.values()), default=0)


@router.post("/v1/memory/search", response_model=SearchResponse, responses=EMBEDDER_ERRORS, **allow(Policy.SERVICE))
async def search(body: SearchRequest, d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """The top ``limit`` memories by relevance with time decay, best first (``score`` ranks;
    ``minScore``, default none, filters on ``relevance``)."""
    return await d.embedding_work(lambda: _search(body, d))


def _search(body: SearchRequest, d: Daemon) -> dict[str, Any]:
    _check_optional("userId", body.user_id)
    _check_optional("channel", body.channel)
    personas = _personas(d, body.persona)
    limit = body.limit or d.app.config.memory.limit
    hits = known_facts.search(
        d.app.memory,
        body.query,
        personas,
        user=body.user_id,
        channel=body.channel,
        limit=limit,
        min_relevance=body.min_score or 0.0,
    )
    return {"results": [{**h.as_result(), "persona": h.memory.persona} for h in hits], "total_found": len(hits)}


@router.post(
    "/v1/memory/context", response_model=KnownFactsResponse, responses=EMBEDDER_ERRORS, **allow(Policy.SERVICE)
)
async def context(body: KnownFactsRequest, d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """The ``## Known Facts (from memory)`` block for a query, within a token budget.

    Defaults: ``tokenBudget`` 2000, ``limit`` 20, no threshold (``minScore`` sets
    one). The top ``limit`` memories by score are taken best first until the next
    one would not fit. Answers ``{context, memoriesUsed,
    tokensUsed, tokenBudget}``; nothing relevant is ``""`` and 0.
    """
    return await d.embedding_work(lambda: _context(body, d))


def _context(body: KnownFactsRequest, d: Daemon) -> dict[str, Any]:
    check_identifier("userId", body.user_id)
    _check_optional("channel", body.channel)
    cfg = d.app.config.memory
    personas = _personas(d, body.persona)
    budget = body.token_budget or cfg.token_budget
    hits = known_facts.search(
        d.app.memory,
        body.query,
        personas,
        user=body.user_id,
        channel=body.channel,
        limit=body.limit or cfg.limit,
        min_relevance=body.min_score or 0.0,
    )
    return known_facts.known_facts(hits, budget, _count(d, personas)).as_json()


def _scope(body: AddMemory) -> Scope:
    given = [x for x in (body.scope, body.user_id, body.channel) if x is not None]
    if len(given) > 1:
        raise InvalidInput("scope", "give only one of scope, user_id, channel")
    if body.user_id is not None:
        return Scope.user(body.user_id)
    if body.channel is not None:
        return Scope.channel(body.channel)
    return Scope.parse(body.scope) if body.scope is not None else GLOBAL


@router.post(
    "/v1/memories",
    status_code=201,
    response_model=MemoryAdded,
    responses={200: {"model": MemoryAdded, "description": "Already stored"}, **EMBEDDER_ERRORS},
    **allow(Policy.ADMIN),
)
async def add(body: AddMemory, d: Annotated[Daemon, Depends(daemon)]) -> JSONResponse:
    """Store a memory (201), or find the identical one already stored (200, ``created: false``)."""
    return await d.embedding_work(lambda: _add(body, d))


def _add(body: AddMemory, d: Daemon) -> JSONResponse:
    _check_length("text", body.text, d)
    created_at = parse_timestamp(body.created_at) if body.created_at is not None else None
    memory, created = d.app.memory.add(
        body.persona, _scope(body), body.text, body.category, body.metadata, created_at=created_at
    )
    return JSONResponse({"memory": memory.as_json(), "created": created}, status_code=201 if created else 200)


@router.post("/v1/memories/import", response_model=ImportResponse, responses=EMBEDDER_ERRORS, **allow(Policy.ADMIN))
async def import_(body: ImportRequest, d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """Store a batch in one transaction. An invalid item refuses the whole batch (422 naming
    ``memories[i].field``) unless ``skip_invalid``, which stores the rest and reports it."""
    return await d.embedding_work(lambda: _import(body, d))


def _import(body: ImportRequest, d: Daemon) -> dict[str, Any]:
    if body.persona is not None:
        d.app.memory.check_persona(body.persona)
    valid: list[NewMemory] = []
    skipped: list[dict[str, Any]] = []
    for index, item in enumerate(body.memories):
        try:
            _check_length("text", item.get("text"), d)
            valid.append(parse_line(json.dumps(item), body.persona, d.app.memory.validate))
        except (InvalidInput, NotFound) as exc:
            if not body.skip_invalid:
                if isinstance(exc, NotFound):  # an unknown persona is a 404, as everywhere
                    raise NotFound(exc.kind, exc.name, f"in memories[{index}]") from None
                raise InvalidInput(f"memories[{index}].{exc.field}", str(exc)) from None
            skipped.append({"index": index, "reason": str(exc)})
    results = d.app.memory.add_many(valid) if valid else []
    added = sum(1 for _id, created in results if created)
    return {
        "added": added,
        "duplicates": len(results) - added,
        "skipped": skipped,
        "ids": [mid for mid, _created in results],
    }


@router.get("/v1/memories", response_model=MemoryList, responses=error_responses(404, 422), **allow(Policy.ADMIN))
def list_memories(
    d: Annotated[Daemon, Depends(daemon)],
    persona: Annotated[str, Query(min_length=1, max_length=MAX_NAME, description="Whose memories.")],
    scope: Annotated[
        str | None, Query(pattern=SCOPE_PATTERN, description="global | channel:NAME | user:ID (default: all).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> dict[str, Any]:
    """A persona's memories, newest first."""
    parsed = Scope.parse(scope) if scope is not None else None
    memories = d.app.memory.list_memories(persona, parsed, limit, offset)
    return {"memories": [m.as_json() for m in memories], "total": d.app.memory.count(persona)}


@router.delete(
    "/v1/memories/{memory_id:agentd_id}",
    response_model=Forgotten,
    responses=error_responses(404, 422),
    **allow(Policy.ADMIN),
)
def forget(memory_id: Annotated[int, Path(ge=1, le=MAX_ID)], d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """Delete one memory (its row, vector and index entry)."""
    return {"forgotten": d.app.memory.forget(memory_id).as_json()}


@router.get(
    "/v1/memories/{memory_id:agentd_id}/history",
    response_model=MemoryHistory,
    responses=error_responses(404, 422),
    **allow(Policy.ADMIN),
)
def history(memory_id: Annotated[int, Path(ge=1, le=MAX_ID)], d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """How a memory changed through fact extraction (``[memory] extract``), oldest first; also for a
    memory since deleted (as ``agentd memory history ID``)."""
    return {"memory_id": memory_id, "history": [e.as_json() for e in d.app.memory.revisions(memory_id)]}
