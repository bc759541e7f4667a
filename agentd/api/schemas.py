"""Request bodies: strict (no coercion of ``"1"`` to 1), unknown fields refused.

Field names follow their callers: the chat and channel bodies are agentd's own;
the memory service keeps seed 003's camelCase (``userId``, ``tokenBudget``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Most memories one import request may carry.
MAX_IMPORT = 10_000


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


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
    userId: str | None = Field(None, description="Include this user's memories (never another user's).")  # noqa: N815
    persona: str | None = Field(None, description="Search this persona's memories (default: every persona).")
    channel: str | None = Field(None, description="Include this channel's memories.")
    limit: int | None = Field(None, ge=1, le=1000, description="Default: memory.limit (20).")
    minScore: float | None = Field(None, ge=0.0, le=1.0, description="Default: memory.min_score.")  # noqa: N815


class KnownFactsRequest(_Body):
    """``POST /v1/memory/context`` (seed 003)."""

    userId: str = Field(description="Whose memories may be used (plus global and channel ones).")  # noqa: N815
    query: str = Field(description="The current message; memories are ranked by relevance to it.")
    tokenBudget: int | None = Field(None, ge=1, le=1_000_000, description="Default 2000 (memory.token_budget).")  # noqa: N815
    limit: int | None = Field(None, ge=1, le=1000, description="Memories considered; default 20 (memory.limit).")
    persona: str | None = Field(None, description="Default: every persona.")
    channel: str | None = None
    minScore: float | None = Field(None, ge=0.0, le=1.0, description="Default: memory.min_score.")  # noqa: N815


class AddMemory(_Body):
    """``POST /v1/memories``. Scope: ``scope``, or ``userId`` / ``channel`` as shorthands; default global."""

    persona: str
    text: str
    category: str = "fact"
    scope: str | None = Field(None, description="global | channel:NAME | user:ID")
    userId: str | None = None  # noqa: N815
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
