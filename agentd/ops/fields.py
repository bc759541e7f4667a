"""The field types operations' request models share: what a value may be, said once.

Each type carries its constraint (a pattern, bounds) so that every schema made from a model
(the OpenAPI schema, an MCP tool's ``inputSchema``) publishes it, and :data:`PATTERN_WORDS`
says each pattern in words, for the error every interface gives (``limit``: ``must be ...``).
Integers are JSON integers: ``5``. ``5.0`` (JSON Schema 2020-12 counts it an integer), ``5.5``,
``"5"`` and ``true`` are refused: no coercion. No string anywhere may hold a lone UTF-16
surrogate (it cannot be stored or sent back as UTF-8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from agentd.scopes import CONTROL_OR_FORMAT, IDENTIFIER_PATTERN, IDENTIFIER_RULE, INVISIBLE, WHITESPACE

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
