"""How recalled context is written into the prompt.

Recalled text is data, never instructions: every memory becomes exactly one
list item. In ``## Recalled Memories`` its text is a JSON string literal, so
newlines, quotes, "## System" or "assistant:" inside a memory cannot open a
section, fake a role or close the quote; in seed 003's ``## Known Facts`` block
(which has no quotes) every line break becomes a space.
"""

from __future__ import annotations

import json
import re

MEMORIES_HEADING = "## Recalled Memories"
PROJECT_HEADING = "## Project context (AGENTS.md)"
KNOWN_FACTS_HEADING = "## Known Facts (from memory)"
_CATEGORY = re.compile(r"[^A-Za-z0-9 _.-]")
#: Everything Python's str.splitlines() treats as a line boundary.
_LINE_BREAKS = re.compile("[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]+")


def one_line(text: str) -> str:
    """``text`` with every kind of line break collapsed to one space."""
    return _LINE_BREAKS.sub(" ", text).strip()


def quote(text: str) -> str:
    """``text`` as a one-line, double-quoted literal (JSON string escaping).

    JSON leaves U+0085, U+2028 and U+2029 unescaped, yet they break lines for
    many readers (and for ``str.splitlines``), so they are escaped too.
    """
    return _LINE_BREAKS.sub(
        lambda m: "".join(f"\\u{ord(c):04x}" for c in m.group()), json.dumps(text, ensure_ascii=False)
    )


def memory_line(text: str, category: str, relevance: float) -> str:
    """``- "User's favorite color is blue" (preference, relevance: 0.92)``."""
    safe_category = _CATEGORY.sub("", category) or "fact"
    return f"- {quote(text)} ({safe_category}, relevance: {relevance:.2f})"


def known_fact_line(text: str) -> str:
    """Seed 003's ``- fact`` line, on one line whatever the text holds."""
    return f"- {one_line(text)}"


def truncation_marker(shown: int, total: int) -> str:
    """The visible marker at the end of a truncated project file."""
    return f"[… AGENTS.md truncated to fit the context window: {shown} of {total} tokens shown]"
