"""The memory operations over HTTP: search, context, add, import, list, forget, history.

Each route is a thin adapter over one operation of :mod:`agentd.ops.memory`: its body model is
the operation's request, its response model the operation's result, and the checks (the roles,
the values, the scope) are the operation's. Embedding and SQLite calls block, so the routes
hand their work to the daemon's embedding threads (:meth:`Daemon.embedding_work`), off the
event loop and apart from the threads the rest of the API uses. Every embedder call is bounded
in time: a hung model answers 504 ``embedder_timeout``, a failing one 503
``embedder_unavailable``, a broken answer 502 ``embedder_bad_output``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.convertors import Convertor, register_url_convertor

from agentd.api.roles import Acting, Policy, allow
from agentd.api.state import Daemon, daemon
from agentd.ops import memory as ops
from agentd.schemas.responses import COMMON_ERRORS, error_responses

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


@router.post("/v1/memory/search", response_model=ops.SearchResponse, responses=EMBEDDER_ERRORS, **allow(Policy.SERVICE))
async def search(body: ops.SearchRequest, ctx: Acting, d: Annotated[Daemon, Depends(daemon)]) -> ops.SearchResponse:
    """The top ``limit`` memories by relevance with time decay, best first (``score`` ranks;
    ``minScore``, default none, filters on ``relevance``)."""
    return await d.embedding_work(lambda: ops.search(ctx, body))


@router.post(
    "/v1/memory/context", response_model=ops.KnownFactsResponse, responses=EMBEDDER_ERRORS, **allow(Policy.SERVICE)
)
async def context(
    body: ops.KnownFactsRequest, ctx: Acting, d: Annotated[Daemon, Depends(daemon)]
) -> ops.KnownFactsResponse:
    """The ``## Known Facts (from memory)`` block for a query, within a token budget.

    Defaults: ``tokenBudget`` 2000, ``limit`` 20, no threshold (``minScore`` sets
    one). The top ``limit`` memories by score are taken best first until the next
    one would not fit. Answers ``{context, memoriesUsed,
    tokensUsed, tokenBudget}``; nothing relevant is ``""`` and 0.
    """
    return await d.embedding_work(lambda: ops.context(ctx, body))


@router.post(
    "/v1/memories",
    status_code=201,
    response_model=ops.MemoryAdded,
    responses={200: {"model": ops.MemoryAdded, "description": "Already stored"}, **EMBEDDER_ERRORS},
    **allow(Policy.ADMIN),
)
async def add(body: ops.AddMemory, ctx: Acting, d: Annotated[Daemon, Depends(daemon)]) -> JSONResponse:
    """Store a memory (201), or find the identical one already stored (200, ``created: false``)."""
    added = await d.embedding_work(lambda: ops.remember(ctx, body))
    return JSONResponse(added.as_json(), status_code=201 if added.created else 200)


@router.post("/v1/memories/import", response_model=ops.ImportResponse, responses=EMBEDDER_ERRORS, **allow(Policy.ADMIN))
async def import_(body: ops.ImportRequest, ctx: Acting, d: Annotated[Daemon, Depends(daemon)]) -> ops.ImportResponse:
    """Store a batch in one transaction. An invalid item refuses the whole batch (422 naming
    ``memories[i].field``) unless ``skip_invalid``, which stores the rest and reports it."""
    return await d.embedding_work(lambda: ops.import_batch(ctx, body))


def _bounds(model: type[BaseModel], field: str) -> dict[str, Any]:
    """A request model's field constraints as ``Query``/``Path`` arguments: a parameter publishes
    (and FastAPI checks) what the operation's request model declares, declared once there."""
    found: dict[str, Any] = {}
    for rule in model.model_fields[field].metadata:
        for name in ("ge", "le", "min_length", "max_length", "pattern"):
            if getattr(rule, name, None) is not None:
                found[name] = getattr(rule, name)
    return found


def _query(field: str) -> Any:
    """``Query(...)`` for a :class:`~agentd.ops.models.ListMemories` field: its bounds and description."""
    return Query(description=ops.ListMemories.model_fields[field].description, **_bounds(ops.ListMemories, field))


#: A memory's id in a path (the bounds of the operations' ``id``).
MemoryId = Annotated[int, Path(**_bounds(ops.ForgetMemory, "id"))]


@router.get("/v1/memories", response_model=ops.MemoryList, responses=error_responses(404, 422), **allow(Policy.ADMIN))
def list_memories(
    ctx: Acting,
    persona: Annotated[str, _query("persona")],
    scope: Annotated[str | None, _query("scope")] = None,
    limit: Annotated[int, _query("limit")] = 100,
    offset: Annotated[int, _query("offset")] = 0,
) -> ops.MemoryList:
    """A persona's memories, newest first."""
    return ops.list_memories(ctx, ops.ListMemories(persona=persona, scope=scope, limit=limit, offset=offset))


@router.delete(
    "/v1/memories/{memory_id:agentd_id}",
    response_model=ops.Forgotten,
    responses=error_responses(404, 422),
    **allow(Policy.ADMIN),
)
def forget(memory_id: MemoryId, ctx: Acting) -> ops.Forgotten:
    """Delete one memory (its row, vector and index entry)."""
    return ops.forget(ctx, ops.ForgetMemory(id=memory_id))


@router.get(
    "/v1/memories/{memory_id:agentd_id}/history",
    response_model=ops.MemoryHistory,
    responses=error_responses(404, 422),
    **allow(Policy.ADMIN),
)
def history(memory_id: MemoryId, ctx: Acting) -> ops.MemoryHistory:
    """How a memory changed through fact extraction (``[memory] extract``), oldest first; also for a
    memory since deleted (as ``agentd memory history ID``)."""
    return ops.history(ctx, ops.HistoryRequest(memory_id=memory_id))
