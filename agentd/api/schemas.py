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

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from agentd.access.scopes import CONTROL_OR_FORMAT, IDENTIFIER_PATTERN, INVISIBLE, WHITESPACE
from agentd.config import MAX_MESSAGE_CHARS

#: Most memories one import request may carry.
MAX_IMPORT = 10_000
#: Largest id (SQLite's 64-bit signed integers): ids and offsets above it are refused.
MAX_ID = 2**63 - 1
#: Longest persona name a query string may carry (a longer one is no persona's: 404 either way).
MAX_NAME = 256
#: Longest message a query string may carry (``GET /v1/budget``): percent-encoded it stays
#: well inside the request line the server reads (``HTTP_LINE_LIMIT``).
MAX_QUERY_MESSAGE = 2000
#: Bytes of request line and headers the server reads (uvicorn's h11 default is 16 kB).
HTTP_LINE_LIMIT = 65_536
#: Text with at least one character that is neither whitespace nor invisible (a zero-width space), and no NUL.
TEXT_PATTERN = f"^[^\\x00]*[^{WHITESPACE}{INVISIBLE}\\x00][^\\x00]*$"
#: ``global``, ``channel:NAME`` or ``user:ID``.
SCOPE_PATTERN = f"^(global|channel:{IDENTIFIER_PATTERN[1:-1]}|user:{IDENTIFIER_PATTERN[1:-1]})$"
#: A memory's category (as the memory service checks it).
CATEGORY_PATTERN = "^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$"


def _no_surrogates(value: Any, path: str = "") -> None:
    """Raise ValueError naming where a lone UTF-16 surrogate is, in any string of ``value``."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            where = f" at {path}" if path else ""
            raise ValueError(f"holds a lone UTF-16 surrogate{where} (position {exc.start}): not valid text") from None
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _no_surrogates(key, path)
            _no_surrogates(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, Sequence) and not isinstance(value, bytes):
        for index, item in enumerate(value):
            _no_surrogates(item, f"{path}[{index}]")


def _checked_json(value: Any) -> Any:
    _no_surrogates(value)
    return value


#: A persona's name as a request gives it: unknown names are 404, invisible and control characters 422.
PERSONA_PATTERN = f"^[^{CONTROL_OR_FORMAT}]+$"
Identifier = Annotated[str, Field(pattern=IDENTIFIER_PATTERN, description="1-128 characters, no whitespace.")]
#: A persona's name (unknown ones are 404).
PersonaName = Annotated[str, Field(min_length=1, pattern=PERSONA_PATTERN)]
#: Integers are JSON integers: ``5``. ``5.0`` (JSON Schema 2020-12 counts it an integer), ``5.5``, ``"5"``
#: and ``true`` are refused: no coercion (tests/schemathesis_hooks.py keeps schemathesis to ``5``).
Limit = Annotated[int, Field(ge=1, le=1000)]
TokenBudget = Annotated[int, Field(ge=1, le=1_000_000)]
Score = Annotated[float, Field(ge=0.0, le=1.0)]
Text = Annotated[str, Field(pattern=TEXT_PATTERN)]
Metadata = Annotated[dict[str, Any], AfterValidator(_checked_json)]


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
