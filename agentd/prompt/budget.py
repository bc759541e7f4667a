"""ContextBudget: where every token of one assembled prompt went."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ContextBudget:
    """The accounting of one assembly: tokens per section, what fit and what was dropped.

    ``total_tokens`` counts everything sent: messages with their framing, and the
    tool definitions. ``total_tokens + output_reserve <= window`` always holds.
    """

    model: str
    tokenizer: str
    window: int
    window_source: str
    output_reserve: int
    total_tokens: int
    system_tokens: int
    project_tokens: int
    memory_tokens: int
    user_history_tokens: int
    history_tokens: int
    current_tokens: int
    tools_tokens: int
    history_messages: int
    history_available: int
    memories_included: int
    memories_dropped: int
    messages_dropped: int
    snippets_dropped: int
    project_truncated: bool
    exhausted: bool
    #: The user's profile section (``[memory] profile_tokens``): tokens, memories kept and left out.
    profile_tokens: int = 0
    profile_included: int = 0
    profile_dropped: int = 0
    #: Earlier exchanges recalled by meaning (``[episodes]``): tokens, episodes kept and left out.
    episode_tokens: int = 0
    episodes_included: int = 0
    episodes_dropped: int = 0

    @property
    def budget(self) -> int:
        """Tokens the prompt may use: the window minus the output reserve."""
        return self.window - self.output_reserve

    @property
    def free_tokens(self) -> int:
        """Tokens of the budget left unused."""
        return self.budget - self.total_tokens

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (with ``budget`` and ``free_tokens``)."""
        # Every field is a plain value: no deep copy (asdict's) is needed.
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["budget"], data["free_tokens"] = self.budget, self.free_tokens
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ContextBudget:
        """Rebuild from :meth:`as_json` output (derived keys are ignored; keys added later,
        such as the profile's, take their defaults in records stored before them)."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
