"""JSONL import: parse and validate lines, report what was skipped and why.

One memory per line::

    {"text": "User likes Python", "persona": "buddy", "scope": "user:alice",
     "category": "preference", "metadata": {"source": "crm"},
     "created_at": "2025-01-15T10:30:00Z"}

``text`` is required; ``persona`` may come from ``--persona``; ``scope`` defaults to
``global``, ``category`` to ``fact``, ``created_at`` to now. The file is UTF-8 (a
byte order mark is allowed). A bad line, one that is not UTF-8 included, is skipped
with its line number and reason; the rest are imported (or, strict, none).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentd._exceptions import InvalidInput
from agentd.access.scopes import Scope
from agentd.store.memories import NewMemory

FIELDS = frozenset({"text", "persona", "scope", "category", "metadata", "created_at"})


@dataclass
class ImportReport:
    """What an import did: added, duplicates, and each skipped line with its reason."""

    added: int = 0
    duplicates: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    #: True when a strict import found a bad line and so imported nothing.
    refused: bool = False

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "added": self.added,
            "duplicates": self.duplicates,
            "skipped": [{"line": n, "reason": r} for n, r in self.skipped],
            "refused": self.refused,
        }


def parse_timestamp(value: object, field_name: str = "created_at") -> datetime:
    """An ISO-8601 timestamp (``Z`` or an offset; naive means UTC) as an aware datetime."""
    if not isinstance(value, str):
        raise InvalidInput(field_name, "must be an ISO-8601 string such as 2025-01-15T10:30:00Z")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except ValueError:
        raise InvalidInput(field_name, f"not an ISO-8601 timestamp: {value!r}") from None
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise InvalidInput(field_name, f"{value!r} is out of range (years 1-9999 in UTC)") from None


def parse_line(raw: str, default_persona: str | None, validate: Callable[[NewMemory], NewMemory]) -> NewMemory:
    """One JSONL line as a validated :class:`NewMemory` (raises :class:`InvalidInput`)."""
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInput("line", f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise InvalidInput("line", "must be a JSON object")
    unknown = sorted(set(obj) - FIELDS)
    if unknown:
        raise InvalidInput(unknown[0], f"unknown field; known: {', '.join(sorted(FIELDS))}")
    persona = obj.get("persona", default_persona)
    if persona is None:
        raise InvalidInput("persona", "missing (give it in the line or with --persona)")
    created = parse_timestamp(obj["created_at"]) if "created_at" in obj else None
    item = NewMemory(
        persona=persona,
        scope=Scope.parse(obj.get("scope", "global")),
        category=obj.get("category", "fact"),
        text=obj.get("text"),  # type: ignore[arg-type]  # validated below
        metadata=obj.get("metadata") or {},
        created_at=created,
    )
    return validate(item)


#: The UTF-8 byte order mark some editors write at the start of a file.
BOM = b"\xef\xbb\xbf"


def read_lines(data: bytes) -> Iterator[tuple[int, str | InvalidInput]]:
    """A JSONL file's non-blank lines with their 1-based numbers (split on LF, CRLF or CR; a
    leading byte order mark dropped), each decoded as UTF-8 on its own: a line that is not
    UTF-8 comes as the error to report, and the lines after it are still read."""
    for number, line in enumerate(data.removeprefix(BOM).splitlines(), start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield number, InvalidInput("line", f"not UTF-8: byte 0x{line[exc.start]:02x} at column {exc.start + 1}")
            continue
        if text.strip():
            yield number, text
