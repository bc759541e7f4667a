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

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentd.config import MAX_MESSAGE_CHARS
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
]

#: Longest message a query string may carry (``GET /v1/budget``): percent-encoded it stays
#: well inside the request line the server reads (``HTTP_LINE_LIMIT``).
MAX_QUERY_MESSAGE = 2000
#: Bytes of request line and headers the server reads (uvicorn's h11 default is 16 kB).
HTTP_LINE_LIMIT = 65_536


#: Who reads a channel: ``direct`` (this user and the persona) or ``shared``.
Visibility = Literal["direct", "shared"]
VISIBILITY_FIELD = Field(
    None,
    description="Who reads the channel: 'direct' (only this user and the persona) or 'shared' (the default). "
    "The channel's first message that says so decides; [channels.NAME] visibility in the config wins.",
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class ChatRequest(_Body):
    """``POST /v1/chat``."""

    persona: PersonaName | None = Field(
        None,
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


class ChannelPost(_Body):
    """``POST /v1/channels/{channel}/messages``."""

    user: Identifier = Field(description="Who is speaking.")
    text: Text = Field(max_length=MAX_MESSAGE_CHARS, description="The message (at most [runtime] max_message_chars).")
    persona: PersonaName | None = Field(None, description="Who answers (default: the persona bound to the channel).")
    disable_memory: bool = False
    visibility: Visibility | None = VISIBILITY_FIELD
