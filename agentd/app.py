"""Wiring: build agentd's parts from the config once and hand each what it needs."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from agentd.config import Config
from agentd.embedders import Embedder, build_embedder
from agentd.memory import MemoryService
from agentd.personas import Personas
from agentd.prompt.builder import ContextBuilder
from agentd.prompt.windows import WindowMap
from agentd.store import Store


class App:
    """The parts of a running agentd, created lazily (a CLI command pays only for what it uses).

    Parts may be injected instead (``App(config, embedder=...)``): tests share one
    loaded embedder, and the daemon passes its own.
    """

    def __init__(self, config: Config, **parts: Any) -> None:
        self.config = config
        self._closed = False
        unknown = set(parts) - {"personas", "embedder", "store", "memory"}
        if unknown:
            raise TypeError(f"unknown parts: {sorted(unknown)}")
        # cached_property reads the instance dict first, so an injected part wins.
        self.__dict__.update(parts)

    @cached_property
    def personas(self) -> Personas:
        """Every persona in ``personas.dir``."""
        return Personas.load(self.config.personas_dir)

    @cached_property
    def embedder(self) -> Embedder | None:
        """The configured embedder (``None`` when ``provider = "none"``)."""
        return build_embedder(self.config.embedding)

    @cached_property
    def store(self) -> Store:
        """The database, created and upgraded on first use."""
        dim = self.embedder.dimension if self.embedder is not None else 384
        return Store.open(self.config.database_url, self.config.database.busy_timeout_ms, dim)

    @cached_property
    def memory(self) -> MemoryService:
        """The memory service over the store and the embedder."""
        return MemoryService(self.store, self.embedder, self.config.memory, personas=self.personas)

    @cached_property
    def windows(self) -> WindowMap:
        """The per-model context window map (config, then litellm, then defaults)."""
        from agentd.llm.models import max_input_tokens

        return WindowMap(self.config.models, max_input_tokens)

    @cached_property
    def builder(self) -> ContextBuilder:
        """Assembles personas' prompts from the store."""
        from agentd.llm.tokens import counter_for

        return ContextBuilder(self.store, self.config, self.windows, counter_for)

    def close(self) -> None:
        """Release the database."""
        if "store" in self.__dict__ and not self._closed:
            self.store.close()
        self._closed = True
