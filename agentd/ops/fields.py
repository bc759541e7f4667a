"""The building blocks of the operations' models: their base classes, the field types they share
(what a value may be, said once), and :func:`parse`, which turns a refused value into the error every
interface gives. Nothing here imports more of agentd than the scopes and the error catalogue, so
the models (:mod:`agentd.ops.models`) stay light enough for a client to import.

Each type carries its constraint (a pattern, bounds) so that every schema made from a model
(the OpenAPI schema, an MCP tool's ``inputSchema``) publishes it, and :data:`PATTERN_WORDS`
says each pattern in words, for the error every interface gives (``limit``: ``must be ...``).
Integers are JSON integers: ``5``. ``5.0`` (JSON Schema 2020-12 counts it an integer), ``5.5``,
``"5"`` and ``true`` are refused: no coercion. No string anywhere may hold a lone UTF-16
surrogate (it cannot be stored or sent back as UTF-8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from agentd._exceptions import InvalidInput
from agentd.access.scopes import (
    CONTROL_OR_FORMAT,
    IDENTIFIER_PATTERN,
    IDENTIFIER_RULE,
    INVISIBLE,
    WHITESPACE,
    unseen_character,
)

#: Largest id (SQLite's 64-bit signed integers): ids and offsets above it are refused.
MAX_ID = 2**63 - 1
#: Longest persona name a query string may carry (a longer one is no persona's: 404 either way).
MAX_NAME = 256
#: Text with at least one character that is neither whitespace nor invisible (a zero-width space), and no NUL.
TEXT_PATTERN = f"^[^\\x00]*[^{WHITESPACE}{INVISIBLE}\\x00][^\\x00]*$"
#: ``global``, ``channel:NAME`` or ``user:ID``.
SCOPE_PATTERN = f"^(global|channel:{IDENTIFIER_PATTERN[1:-1]}|user:{IDENTIFIER_PATTERN[1:-1]})$"
#: A memory's category (as the memory service checks it).
CATEGORY_PATTERN = "^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$"
#: A persona's name as a request gives it: unknown names are 404, invisible and control characters 422.
PERSONA_PATTERN = f"^[^{CONTROL_OR_FORMAT}]+$"

#: What each declared pattern means, in words (the pattern itself is in the schema).
PATTERN_WORDS: dict[str, str] = {
    IDENTIFIER_PATTERN: IDENTIFIER_RULE,
    PERSONA_PATTERN: "must not be empty nor hold control, invisible or bidirectional characters",
    TEXT_PATTERN: "must not be empty, whitespace or invisible characters only, and must not hold a NUL character",
    SCOPE_PATTERN: "must be global, channel:NAME or user:ID",
    CATEGORY_PATTERN: "must be 1-64 letters, digits, spaces, '_', '.' or '-'",
}
#: Patterns whose refusal names the unseen character found (an id, a persona's name).
NAMES_UNSEEN = frozenset({IDENTIFIER_PATTERN, PERSONA_PATTERN})


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


#: A channel's or a user's id.
Identifier = Annotated[str, Field(pattern=IDENTIFIER_PATTERN, description="1-128 characters, no whitespace.")]
#: A persona's name (unknown ones are 404).
PersonaName = Annotated[str, Field(min_length=1, pattern=PERSONA_PATTERN)]
#: How many results an HTTP search may ask for.
Limit = Annotated[int, Field(ge=1, le=1000)]
#: The most tokens a context block may take.
TokenBudget = Annotated[int, Field(ge=1, le=1_000_000)]
#: A relevance in [0, 1].
Score = Annotated[float, Field(ge=0.0, le=1.0)]
#: A text that is not blank and holds no NUL.
Text = Annotated[str, Field(pattern=TEXT_PATTERN)]
#: A JSON object kept as given.
Metadata = Annotated[dict[str, Any], AfterValidator(_checked_json)]


class Request(BaseModel):
    """An operation's input: strict (no coercion of ``"1"`` to 1), frozen, unknown fields refused
    (``is not a known field``); fields are filled by name or by alias (``userId`` or ``user_id``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class Result(BaseModel):
    """An operation's output, frozen: the HTTP body, the MCP tool's result, the client's model."""

    model_config = ConfigDict(frozen=True)

    def as_json(self) -> dict[str, Any]:
        """The JSON object every interface shows (field names as published: aliases)."""
        return self.model_dump(mode="json", by_alias=True)


ModelT = TypeVar("ModelT", bound=BaseModel)


def parse(model: type[ModelT], arguments: Mapping[str, Any] | None) -> ModelT:
    """``model`` from raw arguments (an MCP call's, a skill's, the CLI's); the first error is
    :class:`~agentd.InvalidInput` naming the field (``memories.0.text``) and the reason."""
    try:
        return model.model_validate(dict(arguments or {}))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise InvalidInput(field_name(first["loc"]), describe(dict(first))) from None


def field_name(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the field an error names (``body``/``query``/``path`` dropped)."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] or parts[:1]
    return ".".join(parts)


def describe(error: dict[str, Any]) -> str:
    """The reason of one pydantic error, in the words every interface gives it."""
    kind = error.get("type", "")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known field"
    if kind == "string_pattern_mismatch":
        pattern = str((error.get("ctx") or {}).get("pattern", ""))
        got = error.get("input")
        unseen = unseen_character(got) if isinstance(got, str) else None
        if unseen is not None and pattern in NAMES_UNSEEN:
            return f"must not hold control, invisible or bidirectional characters: {unseen}"
        return PATTERN_WORDS.get(pattern, f"must match {pattern}")
    if kind == "string_unicode":
        return "holds a lone UTF-16 surrogate: not valid text"
    msg = str(error.get("msg", "is invalid"))
    if "input" in error and kind not in ("json_invalid",):
        got = error["input"]
        msg += f" (got {type(got).__name__})" if not isinstance(got, str | int | float | bool) else ""
    return msg[0].lower() + msg[1:] if msg else msg
