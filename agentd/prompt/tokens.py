"""Token counting behind one small interface.

A ``len(text) / 4`` estimate would be allowed; agentd does better and counts with the model's
own tokenizer as litellm selects it (tiktoken's o200k/cl100k, or the Hugging
Face tokenizer litellm ships for a model family), so CJK text and source code —
where ``len / 4`` undercounts by 2-4x — are counted right. Message framing is
counted the way litellm's ``token_counter`` counts a chat request, so the sum of
the parts is never less than litellm's count of the whole prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

#: Tokens a chat message costs beyond its content: 3 of framing + 1 for the role.
PER_MESSAGE = 4
#: Tokens that prime the reply, once per request.
REPLY_PRIMING = 3
#: Slack per join when sections of one message are counted apart ("\n\n" may merge).
JOIN = 1


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text; ``name`` identifies the tokenizer (cached counts are keyed on it)."""

    name: str

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        ...


def tools_tokens(counter: TokenCounter, tools: Sequence[dict[str, Any]]) -> int:
    """Tokens the tool definitions cost: their JSON, an upper bound of how providers render them."""
    return counter.count(json.dumps(list(tools), separators=(",", ":"))) if tools else 0
