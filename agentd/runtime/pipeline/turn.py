"""Preparing a turn: everything before the model is called, in one function.

:meth:`TurnPreparer.prepare` is what a real reply runs (``Responder.respond``) and
what the previews show (``agentd budget``, ``GET /v1/budget``), so what a preview
says a turn would use is what the turn uses:

1. the query: the user's burst of messages since the last reply (at most
   :data:`TRIGGER_MESSAGES`), ending with the current message;
2. the user's earlier exchanges in this channel (:mod:`agentd.prompt.user_history`)
   that the prompt's recent history no longer carries, and the search seeds all
   matches give, which join a sparse query;
3. automatic retrieval, bounded in time (:mod:`agentd.runtime.pipeline.retrieval`): memories,
   and earlier exchanges of this channel (or of the user's direct channels) recalled by
   meaning (:mod:`agentd.memory.episodes`), less those the recent history carries;
4. the user's profile memories (``[memory] profile_tokens``, off by default);
5. the tools the persona may call here;
6. the prompt, assembled by priority under the model's window.

Opting out opts out: with ``disable_memory`` on the request or ``[memory]
auto_retrieve = false`` nothing is recalled — no memories, no profile and no
earlier exchanges; ``[history] enabled = false`` turns off earlier exchanges alone.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from agentd.app import App
from agentd.config import Config
from agentd.memory import MemoryHit, MemoryService
from agentd.memory.episodes import Episodes
from agentd.personas import Persona, Personas
from agentd.prompt.assembler import AssembledContext
from agentd.prompt.builder import ContextBuilder
from agentd.prompt.user_history import HistoryRecall, UserHistory, normalise, seeded_query
from agentd.runtime.events import RecallStatus
from agentd.runtime.pipeline.retrieval import Retrieval, Retriever
from agentd.skills import DelegateRunner, SkillRegistry, ToolSource, build_registry
from agentd.store import Store
from agentd.store.memories import Memory
from agentd.visibility import ChannelVisibility, resolve

#: How many of the user's messages since the last reply make up the retrieval query.
TRIGGER_MESSAGES = 3
#: How far back a preview without a message looks for the user's last message.
PREVIEW_LOOKBACK = 50


@dataclass(frozen=True)
class StageTimes:
    """Milliseconds each stage of preparing a turn took (the ``turn`` log line carries them)."""

    #: Reading the query's burst and the channel's recent history; recalling the user's earlier exchanges.
    history_ms: float = 0.0
    #: Automatic retrieval (embedding the query and searching), as the caller waited for it.
    retrieval_ms: float = 0.0
    #: The profile, the tools and assembling the prompt under the window.
    assemble_ms: float = 0.0


@dataclass(frozen=True)
class PreparedTurn:
    """A turn ready for the model: its query, what was recalled, its tools, and the prompt."""

    query: str
    recalled: HistoryRecall
    history_status: RecallStatus
    retrieval: Retrieval
    registry: SkillRegistry
    context: AssembledContext
    #: Who reads the channel, which decides which user memories may be used.
    visibility: ChannelVisibility | None = None
    stages: StageTimes = field(default_factory=StageTimes)


class TurnPreparer:
    """Prepares the turns of every persona from the store, the memory service and the config."""

    def __init__(
        self,
        config: Config,
        store: Store,
        memory: MemoryService | None,
        builder: ContextBuilder,
        personas: Personas,
        retriever: Retriever,
        delegate: DelegateRunner | None = None,
        profiles: MemoryService | None = None,
        episodes: Episodes | None = None,
        tools: ToolSource | None = None,
    ) -> None:
        self._config = config
        self._store = store
        self._memory = memory
        self._builder = builder
        self._personas = personas
        self._retriever = retriever
        self._history = UserHistory(store, config.history)
        self._delegate = delegate
        self._profiles = profiles if profiles is not None else memory
        self._episodes = episodes
        #: Tools beyond the skills: the MCP servers' a persona lists.
        self._tools = tools

    @classmethod
    def for_app(
        cls,
        app: App,
        pool: ThreadPoolExecutor,
        delegate: DelegateRunner | None = None,
        episodes: Episodes | None = None,
    ) -> TurnPreparer:
        """A preparer over an :class:`~agentd.app.App`'s parts (retrieval runs on ``pool``)."""
        memory = app.memory if app.embedder is not None else None
        retriever = Retriever(memory, app.config.memory.retrieval_timeout_seconds, pool, episodes)
        return cls(
            app.config,
            app.store,
            memory,
            app.builder,
            app.personas,
            retriever,
            delegate,
            app.memory,
            episodes,
            app.mcp_tools,
        )

    @property
    def builder(self) -> ContextBuilder:
        """The prompt builder (window, tokenizer, history)."""
        return self._builder

    def prepare(
        self,
        persona: Persona,
        channel: str,
        user: str | None,
        text: str | None,
        *,
        message_id: int | None = None,
        disable_memory: bool = False,
        memory_limit: int | None = None,
        memory_budget: int | None = None,
    ) -> PreparedTurn:
        """Everything the model will be given for ``text`` from ``user`` in ``channel``.

        ``message_id`` is the stored current message (a real turn): history is read
        before it. A preview passes none: the message (if any) is not stored, and
        history is the whole channel. Raises :class:`~agentd.ContextOverflow` when
        even the system prompt and the message do not fit. Its reads share one read
        transaction (retrieval's, on the pool's thread, have their own).
        """
        with self._store.snapshot():
            return self._prepare(persona, channel, user, text, message_id, disable_memory, memory_limit, memory_budget)

    def _prepare(
        self,
        persona: Persona,
        channel: str,
        user: str | None,
        text: str | None,
        message_id: int | None,
        disable_memory: bool,
        memory_limit: int | None,
        memory_budget: int | None,
    ) -> PreparedTurn:
        cfg = self._config
        started = time.perf_counter()
        query = self.query(channel, user, text, message_id)
        recall_on = cfg.memory.auto_retrieve and not disable_memory
        recalled = HistoryRecall()
        history_status = RecallStatus.DISABLED
        episode_limit = cfg.episodes.top_k if self._episodes is not None else 0
        # The channel's recent history, read once: history recall and the prompt both use it.
        recent = self._builder.recent(persona, channel, message_id)
        in_prompt: int | None = None
        if recall_on and query and ((cfg.history.enabled and user is not None) or episode_limit):
            # What the prompt's recent history carries is not recalled again (it still gives seeds).
            in_prompt = self._builder.history_start(persona, channel, message_id, recent)
        if recall_on and cfg.history.enabled and user is not None and query:
            recalled = self._history.recall(channel, user, query, message_id, in_prompt)
            history_status = RecallStatus.OK
            query = seeded_query(query, recalled, cfg.history.seed_sparse_below)
        visibility = resolve(cfg, self._store, channel)
        reach = visibility.reach(persona.name, channel, user)
        recalled_at = time.perf_counter()
        retrieval = self._retriever.recall(
            query,
            reach,
            memory_limit or cfg.memory.top_k,
            enabled=recall_on,
            # Some found may be in the recent history and left out: ask for a few more.
            episode_limit=episode_limit * 2,
        )
        retrieved_at = time.perf_counter()
        episodes = _not_in_history(retrieval.episodes, channel, in_prompt)[:episode_limit]
        # The user's profile ([memory] profile_tokens), given whatever the message; memory too, so
        # opting out leaves it out. It needs no embedder.
        profile: tuple[Memory, ...] = ()
        if recall_on and self._profiles is not None:
            mine = self._profiles.profile(persona.name, user)
            profile = tuple(self._profiles.eligible(reach, mine)) if mine else ()
        registry = build_registry(persona, self._memory, self._personas, self._delegate, self._tools)
        context = self._builder.build(
            persona,
            channel,
            text,
            before_id=message_id,
            memories=retrieval.hits,
            user_history=recalled.snippets(),
            tools=registry.tool_definitions(),
            memory_budget=memory_budget,
            profile=profile,
            episodes=episodes,
            # In a channel others read, the model is told who said what (when several speak).
            speaker=user if user is not None and not visibility.private_to(user) else None,
            recent=recent,
        )
        stages = StageTimes(
            (recalled_at - started) * 1000,
            (retrieved_at - recalled_at) * 1000,
            (time.perf_counter() - retrieved_at) * 1000,
        )
        return PreparedTurn(query, recalled, history_status, retrieval, registry, context, visibility, stages)

    def query(self, channel: str, user: str | None, text: str | None, before_id: int | None) -> str:
        """The retrieval query: ``user``'s burst of messages since the last reply, then ``text``.

        Without ``text`` (a preview with no message) the query is the burst that
        ended with ``user``'s last message (anyone's when ``user`` is None): what the
        turn answering it used.
        """
        lookback = PREVIEW_LOOKBACK if text is None else TRIGGER_MESSAGES - 1
        with self._store.read() as conn:
            # (id, role, content, tokens, tokenizer, author), newest first.
            earlier = self._store.messages.history_page(conn, channel, before_id, lookback)
        if text is None:
            # Skip to the newest message of that author; the burst ends there.
            start = next((i for i, m in enumerate(earlier) if m[1] == "user" and (user is None or m[5] == user)), None)
            if start is None:
                return ""
            user = earlier[start][5]
            earlier = earlier[start:]
        burst: list[str] = []
        at_most = TRIGGER_MESSAGES - (1 if text is not None else 0)
        for _id, role, content, _tokens, _counter, author in earlier[:at_most]:
            if role != "user" or author != user:
                break
            burst.append(content)
        parts = [*reversed(burst), *([text] if text is not None else [])]
        return normalise(" ".join(parts))


def _not_in_history(hits: tuple[MemoryHit, ...], channel: str, oldest_in_prompt: int | None) -> tuple[MemoryHit, ...]:
    """Episodes the prompt's recent history does not carry: from another channel (the user's other
    direct channels), or older than its oldest message (``None``: it carries none)."""
    if oldest_in_prompt is None:
        return hits
    return tuple(
        h
        for h in hits
        if (h.memory.metadata.get("episode") or {}).get("channel") != channel
        or (h.memory.source_message_id or 0) < oldest_in_prompt
    )
