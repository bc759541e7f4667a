"""The context record: what a reply was given, typed and versioned.

Written with the reply (:class:`~agentd.runtime.pipeline.record.TurnWriter`) and read back by
``agentd inspect`` and the API, never assembled by hand elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentd.prompt.assembler import AssembledContext
from agentd.prompt.budget import ContextBudget
from agentd.runtime.pipeline.turn import PreparedTurn
from agentd.search.ranking import MemoryHit

#: The version :class:`ContextRecord` writes; records without one were written as version 1.
RECORD_VERSION = 2


@dataclass(frozen=True)
class RecalledMemory:
    """One memory a reply was given, with its scores."""

    id: int
    text: str
    category: str
    scope: str
    score: float
    relevance: float


@dataclass(frozen=True)
class ProfileMemory:
    """One of the user's profile memories a reply was given (``[memory] profile_tokens``)."""

    id: int
    text: str
    category: str


@dataclass(frozen=True)
class RetrievalInfo:
    """How automatic retrieval went for the reply."""

    status: str
    ms: float
    query: str
    reason: str = ""


@dataclass(frozen=True)
class HistoryInfo:
    """The user's earlier exchanges recalled for the reply (the messages they quote) and the seeds."""

    inspected: int = 0
    seeds: tuple[str, ...] = ()
    message_ids: tuple[int, ...] = ()
    status: str = "ok"


@dataclass(frozen=True)
class ToolUse:
    """One tool call of the turn and how it went."""

    name: str
    arguments: dict[str, Any]
    ok: bool
    error: dict[str, str] | None = None


@dataclass(frozen=True)
class ContextRecord:
    """What one reply was given: recalled memories and exchanges, the budget, tools and usage."""

    request_id: str
    retrieval: RetrievalInfo
    memories: tuple[RecalledMemory, ...]
    budget: ContextBudget
    history_ids: tuple[int, ...]
    user_history: HistoryInfo
    usage: dict[str, int]
    tool_calls: tuple[ToolUse, ...] = ()
    rounds: int = 1
    version: int = RECORD_VERSION
    profile: tuple[ProfileMemory, ...] = ()
    #: Earlier exchanges recalled by meaning (``[episodes]``).
    episodes: tuple[RecalledMemory, ...] = ()
    #: The channel's visibility, which user memories it allowed and those it did not (``ineligible``).
    privacy: dict[str, Any] = field(default_factory=dict)
    #: The persona's tools withheld from the asker in this channel (its tool policies).
    withheld_tools: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The stored form (what :meth:`from_json` reads)."""
        return {
            "request_id": self.request_id,
            "retrieval": _fields(self.retrieval),
            "memories": [_fields(m) for m in self.memories],
            "budget": self.budget.as_json(),
            "history_ids": self.history_ids,
            "user_history": _fields(self.user_history),
            "usage": dict(self.usage),
            "tool_calls": [_fields(t) for t in self.tool_calls],
            "rounds": self.rounds,
            "version": self.version,
            "profile": [_fields(m) for m in self.profile],
            "episodes": [_fields(m) for m in self.episodes],
            "privacy": self.privacy,
            "withheld_tools": list(self.withheld_tools),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContextRecord:
        """Read a stored record (any version so far)."""
        history = data.get("user_history") or {}
        return cls(
            request_id=str(data.get("request_id", "")),
            retrieval=RetrievalInfo(**{"status": "ok", "ms": 0.0, "query": "", **(data.get("retrieval") or {})}),
            memories=tuple(RecalledMemory(**m) for m in data.get("memories", ())),
            budget=ContextBudget.from_json(data["budget"]),
            history_ids=tuple(data.get("history_ids", ())),
            user_history=HistoryInfo(
                inspected=int(history.get("inspected", 0)),
                seeds=tuple(history.get("seeds", ())),
                message_ids=tuple(history.get("message_ids", ())),
                status=str(history.get("status", "ok")),
            ),
            usage=dict(data.get("usage") or {}),
            tool_calls=tuple(ToolUse(**t) for t in data.get("tool_calls", ())),
            rounds=int(data.get("rounds", 1)),
            version=int(data.get("version", 1)),
            profile=tuple(ProfileMemory(**m) for m in data.get("profile", ())),
            episodes=tuple(RecalledMemory(**m) for m in data.get("episodes", ())),
            privacy=dict(data.get("privacy") or {}),
            withheld_tools=tuple(data.get("withheld_tools", ())),
        )


def _fields(item: Any) -> dict[str, Any]:
    """A record part's fields as a dict (their values are plain: JSON-ready as they are)."""
    return {name: getattr(item, name) for name in item.__dataclass_fields__}


def recalled_memories(context: AssembledContext) -> tuple[RecalledMemory, ...]:
    """The memories an assembled prompt carries, as the record keeps them."""
    return tuple(_recalled(h) for h in context.memories)


def recalled_episodes(context: AssembledContext) -> tuple[RecalledMemory, ...]:
    """The episodes an assembled prompt carries, as the record keeps them."""
    return tuple(_recalled(h) for h in context.episodes)


def _recalled(h: MemoryHit) -> RecalledMemory:
    m = h.memory
    return RecalledMemory(m.id, m.text, m.category, str(m.scope), round(h.score, 4), round(h.relevance, 4))


def profile_memories(context: AssembledContext) -> tuple[ProfileMemory, ...]:
    """The profile memories an assembled prompt carries, as the record keeps them."""
    return tuple(ProfileMemory(m.id, m.text, m.category) for m in context.profile)


def quoted_message_ids(context: AssembledContext) -> tuple[int, ...]:
    """The ids of the earlier messages the prompt's recalled exchanges quote."""
    return tuple(i for s in context.user_history for i in s.message_ids)


def context_record(
    request_id: str,
    user: str | None,
    prepared: PreparedTurn,
    usage: dict[str, int],
    tools: tuple[ToolUse, ...],
    rounds: int,
) -> ContextRecord:
    """What a reply was given: the context record stored with it (``usage``, ``tools`` and
    ``rounds``: what the model-and-tool rounds used)."""
    retrieval, ctx = prepared.retrieval, prepared.context
    return ContextRecord(
        request_id=request_id,
        retrieval=RetrievalInfo(retrieval.status, round(retrieval.elapsed_ms, 2), retrieval.query, retrieval.reason),
        memories=recalled_memories(ctx),
        budget=ctx.budget,
        history_ids=ctx.history_ids,
        user_history=HistoryInfo(
            prepared.recalled.inspected,
            prepared.recalled.seeds,
            quoted_message_ids(ctx),
            prepared.history_status,
        ),
        usage=usage,
        tool_calls=tools,
        rounds=rounds,
        profile=profile_memories(ctx),
        episodes=recalled_episodes(ctx),
        privacy=_privacy_note(prepared, user),
        withheld_tools=prepared.withheld,
    )


def _privacy_note(prepared: PreparedTurn, user: str | None) -> dict[str, Any]:
    """What the context record keeps of the channel's visibility and the user memories it ruled out."""
    seen = prepared.visibility
    if seen is None:
        return {}
    if seen.private_to(user):
        rule = f"direct channel of {user}: all of {user}'s user memories are eligible"
    else:
        rule = f"shared channel: {user}'s user memories are eligible only if learned in #{seen.channel}"
    return {
        **seen.as_json(),
        "rule": rule,
        "ineligible": [i.as_json() for i in prepared.retrieval.ineligible],
    }


__all__ = [
    "context_record",
    "RECORD_VERSION",
    "ContextRecord",
    "HistoryInfo",
    "ProfileMemory",
    "RecalledMemory",
    "RetrievalInfo",
    "ToolUse",
    "profile_memories",
    "quoted_message_ids",
    "recalled_episodes",
    "recalled_memories",
]
