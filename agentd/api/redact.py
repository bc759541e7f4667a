"""What a channel feed may carry of a turn's events: nothing private to the user who spoke.

Whoever follows ``GET /v1/channels/{channel}/events`` may be anyone the channel's
adapter serves, so a turn's events are reduced before they go out there:

* ``memory_context``: a user-scoped memory (or near-miss) keeps only its scope
  kind, relevance and score (``withheld: true``); global and channel memories
  are shown as they are (every reader of the channel may see them).
* ``tool_call`` of ``remember`` into the user's scope: its ``text`` is withheld.
* ``tool_result`` of ``remember`` into a user scope: its ``text`` is withheld;
  of ``recall``: each result keeps only its score (the skill's results do not say
  their scope, so none is shown).

The user's own turn stream (``POST /v1/chat``, the OpenAI endpoint, ``agentd
chat``) gets the events whole.
"""

from __future__ import annotations

from typing import Any

from agentd.runtime import Event, MemoryContext
from agentd.runtime.events import ToolCall, ToolResult

WITHHELD = "withheld"


def reduced(snippet: dict[str, Any]) -> dict[str, Any]:
    """A memory snippet as a follower may see it: a user's own memory keeps only its scope kind and scores."""
    if not str(snippet.get("scope", "")).startswith("user:"):
        return snippet
    return {"scope": "user", "relevance": snippet.get("relevance"), "score": snippet.get("score"), WITHHELD: True}


def for_followers(event: Event) -> dict[str, Any]:
    """``event.as_json()`` with what only the speaking user may see taken out."""
    data = event.as_json()
    if isinstance(event, MemoryContext):
        data["memories"] = [reduced(m) for m in data["memories"]]
        data["near_misses"] = [reduced(m) for m in data["near_misses"]]
    elif isinstance(event, ToolCall) and event.name == "remember":
        if event.arguments.get("scope") in (None, "", "user"):
            data["arguments"] = {k: v for k, v in event.arguments.items() if k != "text"} | {WITHHELD: ["text"]}
    elif isinstance(event, ToolResult) and event.result is not None:
        result = dict(event.result)
        if event.name == "remember" and str(result.get("scope", "")).startswith("user:"):
            result = {k: v for k, v in result.items() if k != "text"} | {WITHHELD: ["text"]}
        elif event.name == "recall":
            items = result.get("results")
            if isinstance(items, list):
                result["results"] = [
                    {"score": i.get("score"), WITHHELD: True} if isinstance(i, dict) else None for i in items
                ]
        data["result"] = result
    return data
