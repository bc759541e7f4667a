"""Request bodies: strict (no coercion of ``"1"`` to 1), unknown fields refused.

Field names are snake_case across the API. The memory service's published
camelCase names (``userId``, ``tokenBudget``, ``minScore``) are accepted as
aliases on the memory routes, so clients written against that contract work.

What the API enforces is declared here, so the OpenAPI schema says it: channel
and user ids (:data:`~agentd.access.scopes.IDENTIFIER_PATTERN`), texts that are not
blank and hold no NUL (:data:`TEXT_PATTERN`), scopes, categories, ranges. Limits
that come from the configuration (``memory.max_text_chars``) are filled into the
published schema by :func:`agentd.api.openapi.published`. No string anywhere in
a body may hold a lone UTF-16 surrogate (it cannot be stored or sent back as UTF-8).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

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
from agentd.ops.memory import IMPORT_ITEM, MAX_IMPORT, AddMemory, ImportRequest, KnownFactsRequest, SearchRequest
from agentd.ops.models import VISIBILITY_FIELD, ChannelPost, ChatRequest, Visibility

#: The shared field types live with the operations (:mod:`agentd.ops.fields`); re-exported for the routes.
__all__ = [
    "CATEGORY_PATTERN",
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
    "MAX_IMPORT",
    "IMPORT_ITEM",
    "AddMemory",
    "ImportRequest",
    "KnownFactsRequest",
    "SearchRequest",
    "VISIBILITY_FIELD",
    "ChannelPost",
    "ChatRequest",
    "Visibility",
]

#: Longest message a query string may carry (``GET /v1/budget``): percent-encoded it stays
#: well inside the request line the server reads (``HTTP_LINE_LIMIT``).
MAX_QUERY_MESSAGE = 2000
#: Bytes of request line and headers the server reads (uvicorn's h11 default is 16 kB).
HTTP_LINE_LIMIT = 65_536


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)
