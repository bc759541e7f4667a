"""The per-model context window map.

Looked up in order: the persona's own ``context_window``; ``[models.context_windows]``
exact names; its glob patterns (``claude-*``; the longest matching pattern wins);
litellm's model information (``max_input_tokens``); finally the defaults
(``claude_context_window`` = 200k for Claude models, else
``default_context_window``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

from agentd.config import ModelsConfig

ModelInfo = Callable[[str], int | None]


@dataclass(frozen=True)
class Window:
    """A model's context window in tokens, and where that number came from."""

    tokens: int
    source: str


class WindowMap:
    """Resolves a model name to its context window."""

    def __init__(self, config: ModelsConfig, model_info: ModelInfo | None = None) -> None:
        self._config = config
        self._model_info = model_info

    def window_for(self, model: str, override: int | None = None) -> Window:
        """The context window of ``model`` (``override``: the persona's own setting)."""
        if override is not None:
            return Window(override, "persona")
        table = self._config.context_windows
        if model in table:
            return Window(table[model], "config")
        globs = [p for p in table if any(c in p for c in "*?[") and fnmatch.fnmatchcase(model, p)]
        if globs:
            best = max(globs, key=lambda p: (len(p.replace("*", "")), p))
            return Window(table[best], f"config {best!r}")
        if self._model_info is not None:
            tokens = self._model_info(model)
            if tokens:
                return Window(tokens, "litellm")
        if "claude" in model.lower():
            return Window(self._config.claude_context_window, "default (claude)")
        return Window(self._config.default_context_window, "default")
