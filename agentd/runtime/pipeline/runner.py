"""The turn pipeline's parts in one process: the preparer, the writer, a responder per actor, and
the subagents the ``delegate`` skill runs inline.

Every way of running turns builds one :class:`TurnRunner`: the intake stores messages with its
writer and previews turns with its preparer; local actors answer with its responders.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentd._exceptions import SkillExecutionFailed
from agentd.app import App
from agentd.llm.chat import ChatModel
from agentd.memory.episodes import Episodes
from agentd.personas import Persona
from agentd.runtime.events import Error, Event, MemoryContext
from agentd.runtime.inflight import InFlight
from agentd.runtime.messages import Turn
from agentd.runtime.pipeline.approval import ApprovalBook
from agentd.runtime.pipeline.record import TurnWriter
from agentd.runtime.pipeline.respond import Responder
from agentd.runtime.pipeline.turn import TurnPreparer
from agentd.skills import SkillCaller


class TurnRunner:
    """Prepares, answers and stores turns in this process (also the skills' ``DelegateRunner``)."""

    def __init__(
        self, app: App, llm: ChatModel, pool: ThreadPoolExecutor, inflight: InFlight, episodes: Episodes | None
    ) -> None:
        """``pool``: where retrieval runs; ``inflight``: the turns whose cancel flag a subagent shares."""
        self._app = app
        self._config = app.config
        self._llm = llm
        self._inflight = inflight
        # The CPU-bound parts of turns take turns ([runtime] turn_slots): under the GIL, fifty
        # actors preparing at once only make each other, and the accept path, wait longer.
        self._slots = threading.BoundedSemaphore(app.config.runtime.slots)
        self.preparer = TurnPreparer.for_app(app, pool, delegate=self, episodes=episodes)
        self.writer = TurnWriter(app.store, app.builder)
        #: Approvals and the audit trail of tool calls.
        self.book = ApprovalBook(app.store, app.config.tools.approval_timeout_seconds)

    def responder(self, persona: Persona, channel: str) -> Responder:
        """A responder for one (persona, channel) actor."""
        return Responder(
            persona,
            channel,
            config=self._config,
            preparer=self.preparer,
            writer=self.writer,
            llm=self._llm,
            book=self.book,
            slots=self._slots,
        )

    def run_subagent(self, persona: str, task: str, caller: SkillCaller) -> dict[str, Any]:
        """Run ``persona`` on ``task`` in a child channel, inline, with the subagent memory budget."""
        limit = self._config.runtime.delegate_max_depth
        chain = caller.chain or (caller.persona,)
        if len(chain) > limit:
            raise SkillExecutionFailed(f"delegation depth limit ({limit}) reached: {' -> '.join(chain)}")
        target = self._app.personas[persona]
        child = f"{caller.channel}~{persona}"
        stored = self.writer.accept(
            target,
            child,
            caller.persona,
            task,
            request_id=uuid.uuid4().hex,
            source="delegate",
            reply_to=caller.message_id,
        )
        events: list[Event] = []
        assert stored.request_id is not None
        turn = Turn(stored.request_id, persona, child, caller.user or caller.persona, stored.id, task, events.append)
        parent_cancel = self._inflight.cancel_of(caller.message_id)
        if parent_cancel is not None:
            turn.draft.cancel = parent_cancel  # shutdown cuts the subagent when it cuts its caller
        with self._inflight.subagent(turn):
            outcome = self.responder(target, child).respond(
                turn,
                chain=(*chain, persona),
                memory_limit=self._config.runtime.subagent_memory_candidates,
                memory_budget=self._config.runtime.subagent_memory_tokens,
            )
        if not outcome.ok:
            error = next((e for e in events if isinstance(e, Error)), None)
            raise SkillExecutionFailed(
                f"{persona} could not finish the task: {error.message if error else 'unknown error'}"
            )
        recalled = next((e for e in events if isinstance(e, MemoryContext)), None)
        return {
            "persona": persona,
            "channel": child,
            "answer": outcome.text,
            "message_id": outcome.reply_id,
            "memories_used": len(recalled.memories) if recalled else 0,
        }


__all__ = ["TurnRunner"]
