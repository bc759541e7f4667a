"""Preparing a turn: everything before the model is called, in one function.

:meth:`TurnPreparer.prepare` is what a real reply runs (``Responder.respond``) and
what the previews show (``agentd budget``, ``GET /v1/budget``), so what a preview
says a turn would use is what the turn uses:

1. the query: the user's burst of messages since the last reply (at most
   :data:`TRIGGER_MESSAGES`), ending with the current message;
2. the channel's transcript (its recent messages), read once, and who reads the channel;
3. recall, one call (:meth:`agentd.recall.Recaller.recall`): the user's earlier exchanges
   the transcript no longer carries (their seeds join a sparse query), memories and
   episodes by meaning, bounded in time, and the user's profile memories
   (``[memory] profile_tokens``, off by default);
4. the tools the persona may call here, for this asker (its ``[tools."NAME"]`` policies: a
   tool the asker may not trigger in this channel is withheld, never offered to the model);
5. the prompt, assembled by priority under the model's window.

Opting out opts out: with ``disable_memory`` on the request or ``[memory]
auto_retrieve = false`` nothing is recalled — no memories, no profile and no
earlier exchanges; ``[history] enabled = false`` turns off earlier exchanges alone.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from agentd.access.visibility import ChannelVisibility, resolve
from agentd.app import App
from agentd.config import Config
from agentd.memory import MemoryService
from agentd.memory.episodes import Episodes
from agentd.personas import Persona, Personas
from agentd.prompt.assembler import AssembledContext
from agentd.prompt.builder import ContextBuilder
from agentd.recall import Recalled, Recaller, RecallRequest, RecallStatus
from agentd.recall.earlier import EarlierRecall, normalise
from agentd.recall.retrieval import Retrieval, Retriever
from agentd.runtime.messages import NO_ROOM, RoomTurn
from agentd.runtime.rooms import room_of
from agentd.skills import DelegateRunner, SkillRegistry, ToolSource, build_registry
from agentd.skills.policy import offer
from agentd.spend.caps import SpendCaps
from agentd.store import Store

#: How many of the user's messages since the last reply make up the retrieval query.
TRIGGER_MESSAGES = 3
#: How far back a preview without a message looks for the user's last message.
PREVIEW_LOOKBACK = 50


@dataclass(frozen=True)
class StageTimes:
    """Milliseconds each stage of preparing a turn took (the ``turn`` log line carries them)."""

    #: Reading the query's burst and the channel's transcript; recalling the user's earlier exchanges.
    history_ms: float = 0.0
    #: Automatic retrieval (embedding the query and searching), as the caller waited for it.
    retrieval_ms: float = 0.0
    #: The profile, the tools and assembling the prompt under the window.
    assemble_ms: float = 0.0


@dataclass(frozen=True)
class PreparedTurn:
    """A turn ready for the model: what was recalled (and the query it used), its tools, and the prompt."""

    recall: Recalled
    registry: SkillRegistry
    context: AssembledContext
    #: Who reads the channel, which decides which user memories may be used.
    visibility: ChannelVisibility | None = None
    stages: StageTimes = field(default_factory=StageTimes)
    #: The persona's tools withheld from this asker here (its tool policies), sorted.
    withheld: tuple[str, ...] = ()

    @property
    def query(self) -> str:
        """The memory query (seeded by the earlier exchanges when sparse)."""
        return self.recall.query

    @property
    def recalled(self) -> EarlierRecall:
        """The user's earlier exchanges that were recalled."""
        return self.recall.earlier

    @property
    def history_status(self) -> RecallStatus:
        """Why the earlier exchanges are what they are (the ``HistoryContext`` event's status)."""
        return self.recall.earlier_status

    @property
    def retrieval(self) -> Retrieval:
        """Memories, near misses and episodes found by meaning, with their status."""
        return self.recall.retrieval


class TurnPreparer:
    """Prepares the turns of every persona from the store, the memory service and the config."""

    def __init__(
        self,
        config: Config,
        store: Store,
        memory: MemoryService | None,
        builder: ContextBuilder,
        personas: Personas,
        recaller: Recaller,
        delegate: DelegateRunner | None = None,
        tools: ToolSource | None = None,
    ) -> None:
        self._config = config
        self._store = store
        self._memory = memory
        self._builder = builder
        self._personas = personas
        self._recaller = recaller
        self._delegate = delegate
        #: Tools beyond the skills: the MCP servers' a persona lists.
        self._tools = tools
        #: The spend caps, checked before a real turn is prepared (never for a preview).
        self.caps = SpendCaps(config, store, personas)

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
        recaller = Recaller(app.config, app.store, retriever, app.memory, episodes)
        return cls(app.config, app.store, memory, app.builder, app.personas, recaller, delegate, app.mcp_tools)

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
        room: RoomTurn = NO_ROOM,
    ) -> PreparedTurn:
        """Everything the model will be given for ``text`` from ``user`` in ``channel``.

        ``room``: in a room, who said ``text`` (a persona calling on this one) and the message it
        is, when not the turn's own (left out of the transcript).

        ``message_id`` is the stored current message (a real turn): the transcript is read
        before it. A preview passes none: the message (if any) is not stored, and the
        transcript is the whole channel. Raises :class:`~agentd.ContextOverflow` when
        even the system prompt and the message do not fit. Its reads share one read
        transaction (retrieval's, on the pool's thread, have their own).
        """
        with self._store.snapshot():
            return self._prepare(
                persona, channel, user, text, message_id, disable_memory, memory_limit, memory_budget, room
            )

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
        room: RoomTurn = NO_ROOM,
    ) -> PreparedTurn:
        cfg = self._config
        started = time.perf_counter()
        query = self.query(channel, user, text, message_id)
        recall_on = cfg.memory.auto_retrieve and not disable_memory
        # The channel's transcript, read once: recall and the prompt both use it.
        recent = self._builder.recent(persona, channel, message_id, skip=room.source)
        transcript_from: int | None = None
        if self._recaller.wants_transcript(query, user, recall_on):
            # What the prompt's transcript carries is not recalled again (it still gives seeds).
            transcript_from = self._builder.transcript_start(persona, channel, message_id, recent)
        visibility = resolve(cfg, self._store, channel)
        reach = visibility.reach(persona.name, channel, user)
        request = RecallRequest(
            query,
            channel,
            user,
            reach,
            recall_on,
            limit=memory_limit,
            before_id=message_id,
            transcript_from=transcript_from,
        )
        recalling = time.perf_counter()
        recalled = self._recaller.recall(request)
        recalled_at = time.perf_counter()
        # Computed from the asker, once per turn: what a tool answers later cannot widen it.
        tools = build_registry(
            persona, self._memory, self._personas, self._delegate, self._tools, config=self._config, store=self._store
        )
        offered = offer(tools, persona, user, channel)
        registry = offered.registry
        context = self._builder.build(
            persona,
            channel,
            text,
            before_id=message_id,
            memories=recalled.retrieval.hits,
            user_history=recalled.earlier.snippets(),
            tools=registry.tool_definitions(),
            memory_budget=memory_budget,
            profile=recalled.profile,
            episodes=recalled.episodes,
            # In a channel others read, the model is told who said what (when several speak).
            speaker=user if user is not None and not visibility.private_to(user) else None,
            recent=recent,
            room=room_of(cfg, channel) is not None,
            caller=room.speaker if room.speaker != user else None,
        )
        times = recalled.times
        stages = StageTimes(
            (recalling - started) * 1000 + times.earlier_ms,
            times.retrieval_ms,
            times.profile_ms + (time.perf_counter() - recalled_at) * 1000,
        )
        return PreparedTurn(recalled, registry, context, visibility, stages, offered.withheld)

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
