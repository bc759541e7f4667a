"""How recalled memories and project files are written into the prompt.

Every memory becomes exactly one list item of ``## Recalled Memories``, its text
a one-line JSON string literal (:func:`agentd.text.quoting.quote`), so nothing inside a
memory can open a section, fake a role or close the quote.
"""

from __future__ import annotations

import re
from datetime import datetime

from agentd.text.quoting import quote

MEMORIES_HEADING = "## Recalled Memories"
#: The heading of the user's profile section (``[memory] profile_tokens``).
PROFILE_HEADING = "## About this user (from memory)"
PROJECT_HEADING = "## Project context (AGENTS.md)"
#: The heading of recalled earlier exchanges (episodes, :mod:`agentd.memory.episodes`).
EPISODES_HEADING = "## Earlier conversations (recalled, with their dates)"
_CATEGORY = re.compile(r"[^A-Za-z0-9 _.-]")


def memory_line(text: str, category: str, relevance: float) -> str:
    """``- "User's favorite color is blue" (preference, relevance: 0.92)``."""
    safe_category = _CATEGORY.sub("", category) or "fact"
    return f"- {quote(text)} ({safe_category}, relevance: {relevance:.2f})"


def profile_line(text: str, category: str) -> str:
    """``- "Prefers short answers" (preference)``: a profile memory, always given, so no relevance."""
    safe_category = _CATEGORY.sub("", category) or "profile"
    return f"- {quote(text)} ({safe_category})"


def episode_line(text: str, when: datetime, relevance: float) -> str:
    """``- 2023-05-08 13:56 UTC: "alice: I moved to Berlin\nbuddy: ..." (relevance: 0.81)``."""
    return f"- {when:%Y-%m-%d %H:%M} UTC: {quote(text)} (relevance: {relevance:.2f})"


def truncation_marker(shown: int, total: int) -> str:
    """The visible marker at the end of a truncated project file."""
    return f"[… AGENTS.md truncated to fit the context window: {shown} of {total} tokens shown]"
