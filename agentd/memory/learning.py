"""What the daemon learns from conversations in the background: episodes and extracted facts.

:class:`Learning` owns the two background jobs (``[episodes]`` and ``[memory]
extract``), is nudged with the channel of every stored reply (by the runtime, on ``done``:
the reply is out before any of this starts) and hands the turn preparer the episodes
to recall from.
"""

from __future__ import annotations

from collections.abc import Callable

from agentd.config import Config
from agentd.llm.chat import ChatModel, ModelSettings
from agentd.llm.offline import is_offline
from agentd.memory.background import JobWorker
from agentd.memory.episodes import JOB as EPISODES_JOB
from agentd.memory.episodes import Episodes
from agentd.memory.extract import JOB as EXTRACT_JOB
from agentd.memory.extract import Extractor
from agentd.memory.service import MemoryService
from agentd.personas import Personas
from agentd.spend.caps import SpendCaps
from agentd.store import Store


class Learning:
    """The background jobs of one runtime (none when their config turns them off)."""

    def __init__(
        self,
        config: Config,
        store: Store,
        memory: MemoryService,
        personas: Personas,
        llm: ChatModel,
        *,
        embeds: bool,
        owns: Callable[[str], bool] | None = None,
    ) -> None:
        """``embeds``: an embedder is configured (episodes need one). ``owns``: the channels whose
        work left from before the jobs catch up with (default: all)."""
        self._config = config
        self._personas = personas
        self._workers: list[JobWorker] = []
        self.episodes: Episodes | None = None
        cfg = config
        if cfg.episodes.enabled and embeds:
            episodes = Episodes(store, memory, cfg.episodes, cfg.channel_visibility)
            self.episodes = episodes
            self._workers.append(JobWorker(EPISODES_JOB, store, episodes.index, owns))
        if cfg.memory.extract == "model":
            worker = JobWorker(EXTRACT_JOB, store, lambda channel, stop: extractor.index(channel, stop), owns)
            caps = SpendCaps(config, store, personas)
            extractor = Extractor(store, memory, llm, cfg.memory, self._settings_for, worker.stop_event, caps)
            self._workers.append(worker)

    def start(self) -> Learning:
        """Start the jobs (each first catches up with what is left from before)."""
        for worker in self._workers:
            worker.start()
        return self

    def nudge(self, channel: str) -> None:
        """A reply in ``channel`` was stored: the jobs have new work there."""
        for worker in self._workers:
            worker.nudge(channel)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every job has nothing left to do (tests, benchmarks)."""
        return all(worker.wait_idle(timeout) for worker in self._workers)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the jobs; what they had not finished is resumed at the next start."""
        for worker in self._workers:
            worker.stop_event.set()
        for worker in self._workers:
            worker.stop(timeout)

    def _settings_for(self, persona_name: str) -> ModelSettings | None:
        """How to call the extraction model for ``persona_name``'s exchanges (None: not extracted)."""
        cfg = self._config
        personas = self._personas
        if persona_name not in personas:
            return None
        persona = personas[persona_name]
        own = not cfg.memory.extract_model
        model = persona.model if own else cfg.memory.extract_model
        if is_offline(model):
            return None  # the offline model answers from what it is given: it cannot extract facts
        return ModelSettings(
            model=model,
            max_tokens=1024,
            temperature=0.0,
            api_base=persona.api_base if own else (cfg.memory.extract_api_base or None),
            api_key_env=persona.api_key_env if own else (cfg.memory.extract_api_key_env or None),
            timeout=cfg.models.llm_timeout_seconds,
            retries=cfg.models.retries,
            retry_backoff=cfg.models.retry_backoff_seconds,
            retry_max_wait=cfg.models.retry_max_wait_seconds,
            persona=persona.name,
        )
