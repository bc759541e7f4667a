"""Request bodies: strict (no coercion of ``"1"`` to 1), unknown fields refused.

Field names are snake_case across the API. The memory service's published
camelCase names (``userId``, ``tokenBudget``, ``minScore``) are accepted as
aliases on the memory routes, so clients written against that contract work.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Most memories one import request may carry.
MAX_IMPORT = 10_000


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class ChatRequest(_Body):
    """``POST /v1/chat``."""

    persona: str = Field(description="The persona that answers.")
    channel: str = Field(description="The channel the conversation lives in.")
    user: str = Field(description="Who is speaking (scopes user memories and history recall).")
    message: str = Field(description="The user's message.")
    disable_memory: bool = Field(False, description="Skip automatic memory retrieval for this message.")


class ChannelPost(_Body):
    """``POST /v1/channels/{channel}/messages``."""

    user: str = Field(description="Who is speaking.")
    text: str = Field(description="The message.")
    persona: str | None = Field(None, description="Who answers (default: the persona bound to the channel).")
    disable_memory: bool = False


class SearchRequest(_Body):
    """``POST /v1/memory/search``: the same search as ``/context``, as a result list."""

    query: str
    user_id: str | None = Field(
        None, alias="userId", description="Include this user's memories (never another user's). Also `user_id`."
    )
    persona: str | None = Field(None, description="Search this persona's memories (default: every persona).")
    channel: str | None = Field(None, description="Include this channel's memories.")
    limit: int | None = Field(None, ge=1, le=1000, description="Default: memory.limit (20).")
    min_score: float | None = Field(
        None,
        alias="minScore",
        ge=0.0,
        le=1.0,
        description="Least relevance of a result; default none (the top `limit` by score). Also `min_score`.",
    )


class KnownFactsRequest(_Body):
    """``POST /v1/memory/context`` (seed 003)."""

    user_id: str = Field(
        alias="userId", description="Whose memories may be used (plus global and channel ones). Also `user_id`."
    )
    query: str = Field(description="The current message; memories are ranked by relevance to it.")
    token_budget: int | None = Field(
        None, alias="tokenBudget", ge=1, le=1_000_000, description="Default 2000 (memory.token_budget)."
    )
    limit: int | None = Field(None, ge=1, le=1000, description="Memories considered; default 20 (memory.limit).")
    persona: str | None = Field(None, description="Default: every persona.")
    channel: str | None = None
    min_score: float | None = Field(
        None,
        alias="minScore",
        ge=0.0,
        le=1.0,
        description="Least relevance of a memory; default none (the top `limit` by score). Also `min_score`.",
    )


class AddMemory(_Body):
    """``POST /v1/memories``. Scope: ``scope``, or ``user_id`` / ``channel`` as shorthands; default global."""

    persona: str
    text: str
    category: str = "fact"
    scope: str | None = Field(None, description="global | channel:NAME | user:ID")
    user_id: str | None = Field(None, alias="userId", description="Store in this user's scope. Also `user_id`.")
    channel: str | None = None
    metadata: dict[str, Any] | None = None
    created_at: str | None = Field(None, description="ISO-8601; default now.")


class ImportRequest(_Body):
    """``POST /v1/memories/import``: a batch, stored in one transaction or not at all."""

    memories: list[dict[str, Any]] = Field(
        max_length=MAX_IMPORT,
        description=(
            'Items as in `agentd memory import`: {"text", "persona", "scope", "category", "metadata", "created_at"}.'
        ),
    )
    persona: str | None = Field(None, description="Persona for items that name none.")
    skip_invalid: bool = Field(False, description="Store the valid items and report the rest (default: refuse all).")
