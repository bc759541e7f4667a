"""The memory service's context (``POST /v1/memory/context``): the best memories for a query, filled greedily by score
into a token budget and written as the ``## Known Facts (from memory)`` block.

:func:`search` is what both ``POST /v1/memory/search`` and ``POST /v1/memory/context``
call; it goes through :meth:`MemoryService.search` (the one search function), once
per persona searched, so ranking, time decay and scoping are the same everywhere.

Token counting: each memory costs ``ceil(len(text) / 4)`` tokens (the estimate the
estimate) or its line's count by a real tokenizer, whichever is larger, so the
block never exceeds the budget for English, code or CJK text. The heading is not
counted (as the memory-service specification says). Filling stops at the first memory that does not fit
(the specification's ``break``): a lower-scored memory never displaces a higher-scored one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentd.access.scopes import Reach
from agentd.memory.service import MemoryService
from agentd.search import MemoryHit, SearchQuery
from agentd.text.quoting import one_line

#: The first line of the block (the memory service's /context contract).
KNOWN_FACTS_HEADING = "## Known Facts (from memory)"
#: Counts the tokens of a text (a model's tokenizer).
TokenCount = Callable[[str], int]


def known_fact_line(text: str) -> str:
    """One ``- fact`` line of the block, on one line whatever the text holds (the block has no quotes)."""
    return f"- {one_line(text)}"


def estimate_tokens(text: str) -> int:
    """The memory service's estimate: ``ceil(len(text) / 4)``."""
    return math.ceil(len(text) / 4)


@dataclass(frozen=True)
class KnownFacts:
    """The assembled context block and what went into it."""

    context: str
    hits: tuple[MemoryHit, ...]
    tokens_used: int
    token_budget: int

    def as_json(self) -> dict[str, Any]:
        """The response of ``/context``: ``{context, memoriesUsed, tokensUsed, tokenBudget}``."""
        return {
            "context": self.context,
            "memoriesUsed": len(self.hits),
            "tokensUsed": self.tokens_used,
            "tokenBudget": self.token_budget,
        }


def search(
    memory: MemoryService,
    query: str,
    personas: Sequence[str],
    *,
    user: str | None,
    channel: str | None,
    limit: int,
    min_relevance: float | None = None,
    shared_channel: str | None = None,
) -> list[MemoryHit]:
    """The best ``limit`` memories for ``query`` across ``personas``, best score first.

    Each persona is searched within persona ∩ (global ∪ ``channel`` ∪ ``user``): a
    user's memories never reach another user's results (and, with ``shared_channel``, a
    channel others read, only those learned there: :class:`~agentd.access.scopes.Reach`).
    """
    hits: list[MemoryHit] = []
    # One embedding serves every persona's search.
    vector = memory.searcher.embed_query(query) if len(personas) > 1 and query.strip() else None
    for persona in personas:
        hits.extend(
            memory.search(
                SearchQuery(
                    query,
                    Reach(persona, channel, user, shared_channel=shared_channel),
                    limit,
                    min_relevance=min_relevance,
                    vector=vector,
                )
            ).hits
        )
    hits.sort(key=lambda h: (-h.score, -h.memory.created_at.timestamp(), -h.memory.id))
    return hits[:limit]


def known_facts(hits: Sequence[MemoryHit], token_budget: int, count: TokenCount | None = None) -> KnownFacts:
    """Fill ``token_budget`` greedily by score (``hits`` come best first); an empty fill is ``""``."""
    used = 0
    chosen: list[MemoryHit] = []
    lines: list[str] = []
    for hit in hits:
        line = known_fact_line(hit.memory.text)
        tokens = max(estimate_tokens(hit.memory.text), count(line) if count is not None else 0)
        if used + tokens > token_budget:
            break
        chosen.append(hit)
        lines.append(line)
        used += tokens
    context = f"{KNOWN_FACTS_HEADING}\n" + "\n".join(lines) + "\n" if lines else ""
    return KnownFacts(context, tuple(chosen), used, token_budget)


__all__ = ["KnownFacts", "TokenCount", "estimate_tokens", "known_facts", "search"]
