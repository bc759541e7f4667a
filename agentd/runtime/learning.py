"""What the daemon learns from conversations in the background: episodes and extracted facts.

:class:`Learning` owns the two background jobs (``[episodes]`` and ``[memory]
extract``), is told of every stored reply (a runtime listener on ``done``: the
reply is out before any of this starts) and hands the turn preparer the episodes
to recall from.
"""

from __future__ import annotations

from collections.abc import Callable

from agentd.app import App
from agentd.llm.chat import ChatModel, ModelSettings
from agentd.llm.offline import is_offline
from agentd.memory.episodes import JOB as EPISODES_JOB
from agentd.memory.episodes import Episodes
from agentd.memory.extract import JOB as EXTRACT_JOB
from agentd.memory.extract import Extractor
from agentd.runtime.background import JobWorker
from agentd.runtime.events import Done, Event
from agentd.runtime.messages import Turn


class Learning:
    """The background jobs of one runtime (none when their config turns them off)."""

    def __init__(self, app: App, llm: ChatModel, owns: Callable[[str], bool] | None = None) -> None:
        """``owns``: the channels whose work left from before the jobs catch up with (default: all)."""
        self._app = app
        self._workers: list[JobWorker] = []
        self.episodes: Episodes | None = None
        cfg = app.config
        if cfg.episodes.enabled and app.embedder is not None:
            episodes = Episodes(app.store, app.memory, cfg.episodes, cfg.channel_visibility)
            self.episodes = episodes
            self._workers.append(JobWorker(EPISODES_JOB, app.store, episodes.index, owns))
        if cfg.memory.extract == "model":
            worker = JobWorker(EXTRACT_JOB, app.store, lambda channel, stop: extractor.index(channel, stop), owns)
            extractor = Extractor(app.store, app.memory, llm, cfg.memory, self._settings_for, worker.stop_event)
            self._workers.append(worker)

    def start(self) -> Learning:
        """Start the jobs (each first catches up with what is left from before)."""
        for worker in self._workers:
            worker.start()
        return self

    def listener(self) -> Callable[[Turn, Event], None]:
        """The runtime listener: a stored reply nudges the jobs for its channel."""

        def on_event(turn: Turn, event: Event) -> None:
            if isinstance(event, Done):
                for worker in self._workers:
                    worker.nudge(turn.channel)

        return on_event

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
        cfg = self._app.config
        personas = self._app.personas
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
