"""Wiring: build agentd's parts from the config once and hand each what it needs."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd._exceptions import ConfigError, StoreError
from agentd.config import Config, ConfigDeprecationWarning, EmbeddingConfig

# Each part is imported when it is first built: a command pays only for the parts it uses
# (``agentd personas`` never loads the store, ``agentd memory list`` never the embedder).
if TYPE_CHECKING:
    import numpy as np

    from agentd.embedders import Embedder
    from agentd.embedders.guard import GuardedEmbedder
    from agentd.mcp.client.tools import McpToolbox
    from agentd.memory import MemoryService
    from agentd.personas import Persona, Personas
    from agentd.prompt.builder import ContextBuilder
    from agentd.prompt.tokens import TokenCounter
    from agentd.prompt.windows import WindowMap
    from agentd.store import Store


def build_embedder(config: EmbeddingConfig) -> Embedder | None:
    """The configured embedder, or ``None`` for ``provider = "none"``."""
    from agentd.embedders import Calibration

    if config.provider == "none":
        return None
    if config.provider == "local":
        from agentd.embedders.local import LocalEmbedder

        embedder: Embedder = LocalEmbedder(config.model, batch_size=config.batch_size)
    else:
        from agentd.llm.embedding import LitellmEmbedder

        embedder = LitellmEmbedder(
            model=config.model,
            api_base=config.api_base or None,
            api_key_env=config.api_key_env or None,
            timeout=config.timeout_seconds,
            batch_size=config.batch_size,
        )
    if config.calibration is not None:
        embedder.calibration = Calibration(config.calibration.midpoint, config.calibration.scale)
    return embedder


class LoadedOnFirstUse:
    """A local embedder whose model (about a second to load) is loaded by its first call.

    Commands that never embed (``agentd memory list``, ``inspect``) never pay for it;
    what the store and the ranking need before that — the model id, the dimension,
    the calibration and the word weights — is known from the model's description.
    """

    def __init__(self, config: EmbeddingConfig) -> None:
        from agentd.embedders import Calibration
        from agentd.embedders.local import DIMENSION, local_model

        spec = local_model(config.model)
        self.model_id = spec.model_id
        self.dimension = DIMENSION
        self.calibration = spec.calibration
        if config.calibration is not None:
            self.calibration = Calibration(config.calibration.midpoint, config.calibration.scale)
        self.words = spec.words
        self._config = config
        self._lock = threading.Lock()
        self._model: Embedder | None = None

    def load(self) -> Embedder:
        """The loaded model (loaded now if it was not yet)."""
        with self._lock:
            if self._model is None:
                model = build_embedder(self._config)
                assert model is not None
                self._model = model
            return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts to be stored (see :class:`~agentd.embedders.Embedder`)."""
        return self.load().embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Search queries (see :class:`~agentd.embedders.Embedder`)."""
        return self.load().embed_queries(texts)


def ensure_data_dir(path: Path) -> Path:
    """Create the data directory if needed; a clear error when it cannot be used."""
    advice = "set AGENTD_HOME to a directory this user can write (or [database] url to a file)"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StoreError(f"the data directory {path} is not a directory; {advice}") from None
    except OSError as exc:
        raise StoreError(f"cannot create the data directory {path}: {exc.strerror}; {advice}") from None
    if not path.is_dir():
        raise StoreError(f"the data directory {path} is not a directory; {advice}")
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise StoreError(f"cannot read and write the data directory {path}; {advice}")
    return path


@dataclass(frozen=True)
class PersonaInfo:
    """One persona as ``agentd personas`` and ``GET /v1/personas`` show it."""

    name: str
    model: str
    description: str
    context_window: int
    window_source: str
    output_reserve: int
    channels: list[str]
    skills: list[str]
    #: The MCP servers whose tools it may call.
    mcp_servers: list[str] = field(default_factory=list)


class App:
    """The parts of a running agentd, created lazily (a CLI command pays only for what it uses).

    Parts may be injected instead (``App(config, embedder=...)``): tests share one
    loaded embedder, and the daemon passes its own.
    """

    def __init__(self, config: Config, **parts: Any) -> None:
        self.config = config
        self._closed = False
        unknown = set(parts) - {"personas", "embedder", "store", "memory", "mcp_tools"}
        if unknown:
            raise TypeError(f"unknown parts: {sorted(unknown)}")
        if parts.get("embedder") is not None:  # an injected embedder is bounded and checked too
            from agentd.embedders.guard import guarded

            parts["embedder"] = guarded(parts["embedder"], config.embedding.timeout_seconds)
        # cached_property reads the instance dict first, so an injected part wins.
        self.__dict__.update(parts)

    @cached_property
    def personas(self) -> Personas:
        """Every persona in ``personas.dir``."""
        from agentd.observe.log import log_deprecations
        from agentd.personas import Personas
        from agentd.skills import SKILL_TOOLS

        with warnings.catch_warnings():  # logged instead, as the config file's are
            warnings.simplefilter("ignore", ConfigDeprecationWarning)
            found = Personas.load(self.config.personas_dir, SKILL_TOOLS)
        log_deprecations([m for persona in found.values() for m in persona.deprecations])
        servers = self.config.mcp.servers
        for persona in found.values():
            unknown = [name for name in persona.mcp_servers if name not in servers]
            if unknown:
                configured = ", ".join(servers) or "none"
                raise ConfigError(
                    persona.source,
                    "mcp_servers",
                    f"unknown MCP server {unknown[0]!r}; configured in [mcp.servers]: {configured}",
                )
        return found

    @cached_property
    def embedder(self) -> GuardedEmbedder | None:
        """The configured embedder (``None`` when ``provider = "none"``), every call bounded in
        time and every answer checked (:mod:`agentd.embedders.guard`); a local model is loaded
        on first use (:class:`LoadedOnFirstUse`)."""
        from agentd.embedders.guard import guarded

        config = self.config.embedding
        inner = LoadedOnFirstUse(config) if config.provider == "local" else build_embedder(config)
        return guarded(inner, config.timeout_seconds)

    @cached_property
    def store(self) -> Store:
        """The database, created and upgraded on first use."""
        from agentd.store import Store

        if not self.config.database.url:
            ensure_data_dir(self.config.data_dir)
        dim = self.embedder.dimension if self.embedder is not None else 384
        return Store.open(self.config.database_url, self.config.database.busy_timeout_ms, dim)

    @cached_property
    def memory(self) -> MemoryService:
        """The memory service over the store and the embedder."""
        from agentd.memory import MemoryService

        return MemoryService(self.store, self.embedder, self.config.memory, personas=self.personas)

    def token_counter(self, persona: Persona) -> TokenCounter:
        """The persona's tokenizer (what an operation counts a context block with)."""
        return self.builder.counter(persona)

    @cached_property
    def windows(self) -> WindowMap:
        """The per-model context window map (config, then litellm's model information, then defaults)."""
        from agentd.llm.models import max_input_tokens
        from agentd.prompt.windows import WindowMap

        return WindowMap(self.config.models, max_input_tokens)

    @cached_property
    def builder(self) -> ContextBuilder:
        """Assembles personas' prompts from the store."""
        from agentd.llm.tokens import counter_for
        from agentd.prompt.builder import ContextBuilder

        return ContextBuilder(self.store, self.config, self.windows, counter_for)

    @cached_property
    def mcp_tools(self) -> McpToolbox | None:
        """The tools of the MCP servers personas list (``None`` when no persona lists one); each
        server is started on first use, once per process, and stopped by :meth:`close`."""
        if not any(p.mcp_servers for p in self.personas.values()):
            return None
        from agentd.mcp.client.servers import ToolServers
        from agentd.mcp.client.tools import McpToolbox

        return McpToolbox(ToolServers(self.config.mcp, self.config.base_dir))

    def start_mcp_servers(self) -> None:
        """Start the MCP servers personas list now, without waiting (the first turn then finds them up)."""
        toolbox = self.mcp_tools
        if toolbox is not None:
            toolbox.servers.start({s for p in self.personas.values() for s in p.mcp_servers})

    def describe_personas(self) -> list[PersonaInfo]:
        """Every persona with its model and the context window it gets."""
        found = []
        for p in self.personas.values():
            window = self.windows.window_for(p.model, p.context_window)
            found.append(
                PersonaInfo(
                    p.name,
                    p.model,
                    p.description,
                    window.tokens,
                    window.source,
                    p.max_reply_tokens,
                    list(p.channels),
                    list(p.skills),
                    list(p.mcp_servers),
                )
            )
        return found

    def preload_models(self) -> None:
        """Load now what the first reply would otherwise wait for: the embedding model and the
        personas' tokenizers (native code, mostly: a thread loads them while others work)."""
        self.start_mcp_servers()
        embedder = self.embedder
        if embedder is not None:
            embedder.load()
        self.preload_tokenizers()

    def preload_tokenizers(self) -> None:
        """Load the personas' tokenizers now (accepting a message counts its tokens)."""
        from agentd.llm.tokens import counter_for

        for persona in self.personas.values():
            counter_for(persona.model)

    def calls_litellm(self) -> bool:
        """True when a persona calls a model through litellm (not the offline model)."""
        from agentd.llm.offline import is_offline

        return any(not is_offline(p.model) for p in self.personas.values())

    def preload_litellm(self) -> None:
        """Import litellm (seconds) when a persona calls a model through it."""
        if self.calls_litellm():
            from agentd.llm import litellm_module

            litellm_module()

    def turn_modules(self) -> list[str]:
        """The modules a process that answers this app's turns imports (for the workers' fork
        server, which imports them once for every worker; litellm only when a persona calls a
        model through it, with :func:`agentd.llm.offline_environment` set first)."""
        modules = ["agentd.app", "agentd.runtime.runtime", "agentd.llm.tokens", "agentd.llm.chat"]
        if self.config.embedding.provider == "local":
            modules += ["agentd.embedders.local", "onnxruntime"]
        if self.calls_litellm():
            from agentd.llm import offline_environment

            offline_environment()
            modules.append("litellm")
        return modules

    def close(self) -> None:
        """Stop the MCP servers, stop waiting on the embedder, and release the database."""
        toolbox = self.__dict__.get("mcp_tools")
        if toolbox is not None:
            toolbox.servers.close()
        embedder = self.__dict__.get("embedder")
        if embedder is not None:
            embedder.close()
        if "store" in self.__dict__ and not self._closed:
            self.store.close()
        self._closed = True
