"""Request bodies: strict (no coercion of ``"1"`` to 1), unknown fields refused.

Field names are snake_case across the API. The memory service's published
camelCase names (``userId``, ``tokenBudget``, ``minScore``) are accepted as
aliases on the memory routes, so clients written against that contract work.

What the API enforces is declared here, so the OpenAPI schema says it: channel
and user ids (:data:`~agentd.scopes.IDENTIFIER_PATTERN`), texts that are not
blank and hold no NUL (:data:`TEXT_PATTERN`), scopes, categories, ranges. Limits
that come from the configuration (``memory.max_text_chars``) are filled into the
published schema by :func:`agentd.api.openapi.published`. No string anywhere in
a body may hold a lone UTF-16 surrogate (it cannot be stored or sent back as UTF-8).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentd.ops.chat import VISIBILITY_FIELD, ChannelPost, ChatRequest, Visibility
from agentd.ops.fields import (
    CATEGORY_PATTERN,
    MAX_ID,
    MAX_NAME,
    PERSONA_PATTERN,
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

#: The shared field types live with the operations (:mod:`agentd.ops.fields`); re-exported for the routes.
__all__ = [
    "VISIBILITY_FIELD",
    "CATEGORY_PATTERN",
    "ChannelPost",
    "ChatRequest",
    "Visibility",
    "MAX_ID",
    "MAX_NAME",
    "PERSONA_PATTERN",
    "SCOPE_PATTERN",
    "TEXT_PATTERN",
    "Identifier",
    "Limit",
    "Metadata",
    "PersonaName",
    "Score",
    "Text",
    "TokenBudget",
]

#: Most memories one import request may carry.
MAX_IMPORT = 10_000
#: Longest message a query string may carry (``GET /v1/budget``): percent-encoded it stays
#: well inside the request line the server reads (``HTTP_LINE_LIMIT``).
MAX_QUERY_MESSAGE = 2000
#: Bytes of request line and headers the server reads (uvicorn's h11 default is 16 kB).
HTTP_LINE_LIMIT = 65_536


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class SearchRequest(_Body):
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


class KnownFactsRequest(_Body):
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


class AddMemory(_Body):
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


class ImportRequest(_Body):
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
