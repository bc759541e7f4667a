"""respond(): answer one stored user message, end to end.

1. the user message is already stored (the runtime persists before dispatch);
2. the turn is prepared (:mod:`agentd.runtime.pipeline.turn`): query, earlier exchanges,
   automatic retrieval within its timeout, tools, the prompt under the window;
3. ``memory_context`` then ``history_context`` go out: what the prompt carries;
4. the model streams, with tools, for a bounded number of rounds
   (:meth:`Responder.model_rounds`);
5. the reply and its context record are stored (:meth:`Responder.store`,
   :mod:`agentd.runtime.pipeline.record`), then ``done`` goes out.

Expected failures (LLM errors, an overflowing prompt, a store error) end the
turn with an ``Error`` event; anything else is a bug and escapes to the actor.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentd._exceptions import AgentdError, AlreadyAnswered, BudgetExceeded, ErrorCode, SkillError, StoreError
from agentd.config import Config
from agentd.llm.chat import ChatModel, ModelSettings, ToolCallRequest, Usage
from agentd.observe import metrics, tracing
from agentd.observe.log import get_logger
from agentd.personas import Persona
from agentd.recall import RecallStatus
from agentd.recall.earlier import EarlierRecall
from agentd.runtime.events import (
    ApprovalRequired,
    Done,
    Error,
    HistoryContext,
    HistorySnippet,
    MemoryContext,
    MemorySnippet,
    PersonaTurnsStopped,
    TokenDelta,
    ToolCall,
    ToolResult,
)
from agentd.runtime.messages import Turn, TurnState
from agentd.runtime.pipeline.approval import ApprovalBook, Decided, Gate, Progress
from agentd.runtime.pipeline.context_record import ToolUse, context_record
from agentd.runtime.pipeline.record import FinishedReply, PassOn, TurnWriter
from agentd.runtime.pipeline.retry import Unsettled, retried
from agentd.runtime.pipeline.turn import PreparedTurn, TurnPreparer
from agentd.runtime.rooms import called_on, room_of
from agentd.skills import SkillCaller, SkillRegistry
from agentd.store.tools import Approval
from agentd.text.quoting import data_json

#: A tool result longer than this (characters) is cut before it goes back to the model.
MAX_TOOL_RESULT_CHARS = 16_000


@dataclass(frozen=True)
class Outcome:
    """How a turn ended."""

    reply_id: int | None
    text: str
    ok: bool
    #: What the prompt carried (``None`` when the turn ended before it was assembled).
    prepared: PreparedTurn | None = None


@dataclass(frozen=True)
class Rounds:
    """What the model-and-tool rounds of a turn produced (the reply's text is in the turn's draft)."""

    usage: Usage
    tools: tuple[ToolUse, ...]
    #: How many times the model was called.
    count: int
    model_ms: float
    #: True when shutdown cut the stream.
    interrupted: bool = False
    #: Milliseconds from the first call to the model to its first text (0: no text came).
    first_token_ms: float = 0.0
    #: Set when a call waits for an owner's approval: the conversation so far, to store.
    paused: Progress | None = None


class Responder:
    """Answers turns for one persona in one channel. Plain object: the actor owns the thread."""

    def __init__(
        self,
        persona: Persona,
        channel: str,
        *,
        config: Config,
        preparer: TurnPreparer,
        writer: TurnWriter,
        llm: ChatModel,
        book: ApprovalBook,
        slots: threading.Semaphore | None = None,
    ) -> None:
        """``slots``: held while the turn prepares (not while the model runs), shared by every
        responder of the runtime; ``book``: approvals and the audit trail of tool calls."""
        self._persona = persona
        self._channel = channel
        self._config = config
        self._preparer = preparer
        self._writer = writer
        self._llm = llm
        self._book = book
        self._slots = slots if slots is not None else threading.Semaphore(1024)
        #: Messages of this channel whose outcome the store refused (still pending).
        self._unsettled = Unsettled()

    def respond(
        self,
        turn: Turn,
        *,
        chain: tuple[str, ...] = (),
        memory_limit: int | None = None,
        memory_budget: int | None = None,
    ) -> Outcome:
        """Answer ``turn``, emitting its events to ``turn.sink``: prepare it, run the model-and-tool
        rounds (:meth:`model_rounds`), then store the reply and its record (:meth:`store`).
        One span, ``turn``, in the trace of the request that brought the message (a subagent's
        turn: under the tool call that asked for it)."""
        attributes = {"agentd.persona": self._persona.name, "agentd.channel": self._channel}
        with tracing.span("turn", attributes, parent=turn.traceparent if not chain else None) as span:
            outcome = self._respond(turn, chain, memory_limit, memory_budget)
            if not outcome.ok:
                span.fail("the turn ended without a stored reply")
            return outcome

    def _respond(
        self, turn: Turn, chain: tuple[str, ...], memory_limit: int | None, memory_budget: int | None
    ) -> Outcome:
        log = get_logger("agentd.turn").bind(
            persona=self._persona.name, channel=self._channel, request_id=turn.request_id, message_id=turn.message_id
        )
        started = time.perf_counter()
        if not turn.draft.start():
            # Cancelled before it started (shutdown): the runtime keeps the message pending.
            return Outcome(None, "", False)
        if not self._settled(turn, log):
            return Outcome(None, "", False)
        prepared: PreparedTurn | None = None
        try:
            gate, approval = self._gate(turn, chain)
            if gate not in (Gate.GO, Gate.RESUME):
                return self._wait(turn, gate, approval, log)
            prepared = self._prepare(turn, memory_limit, memory_budget)
            self._announce(turn, prepared, log)
            resume = (Progress.from_json(approval.resume), Decided(approval)) if approval is not None else None
            rounds = self.model_rounds(turn, prepared, chain, resume)
            if rounds.paused is not None:
                return self._pause(turn, rounds.paused, log, prepared)
            if rounds.interrupted:
                # Cut by shutdown: a turn of its own is answered again after the next start (its
                # message stays pending); a subagent's is not, its caller's turn is.
                why = "the daemon stopped before the reply was complete"
                why += "; the message is kept and answered again after restart" if not chain else ""
                return self._end(turn, ErrorCode.INTERRUPTED, why, log, prepared, resume=not chain)
            return self.store(turn, prepared, rounds, log, started)
        except BudgetExceeded as exc:
            return self._end(turn, exc.code, exc.message, log, prepared, refused=exc)
        except AgentdError as exc:
            return self._end(turn, exc.code, exc.message, log, prepared)

    def _gate(self, turn: Turn, chain: tuple[str, ...]) -> tuple[Gate, Approval | None]:
        """Whether the turn goes ahead, resumes from a decided approval, or waits (only a persona
        with approvals reads the store for it; a delegated task never pauses)."""
        if chain or not self._persona.asks_approval:
            return Gate.GO, None
        return self._book.gate(self._persona.name, self._channel, turn.message_id)

    def _wait(self, turn: Turn, gate: Gate, approval: Approval | None, log: Any) -> Outcome:
        """The turn does not run now: it waits behind a paused turn (its message ``held``), its own
        approval is still pending, or its message was answered already."""
        if gate is Gate.HOLD:
            self._book.hold(turn.message_id)
        state = TurnState.INTERRUPTED if gate is Gate.SKIP else TurnState.AWAITING_APPROVAL
        if not turn.draft.finish(state):
            return Outcome(None, "", False)
        metrics.turn_ended(self._persona.name, state)
        log.info("turn", outcome=str(gate), approval_id=approval.id if approval else None)
        turn.sink(MemoryContext((), RecallStatus.OK, turn.message_id))  # always a turn's first event
        if gate is Gate.SKIP:
            turn.sink(Error(ErrorCode.INTERRUPTED, "this message was answered already", turn.message_id))
            return Outcome(None, "", False)
        waits = f" (id {approval.id})" if approval is not None else ""
        why = (
            f"an earlier message of this channel waits for an owner's approval{waits}; this one is answered after it"
            if gate is Gate.HOLD or approval is None
            else f"the call to {approval.tool} waits for an owner's approval (id {approval.id})"
        )
        turn.sink(Error(ErrorCode.AWAITING_APPROVAL, why, turn.message_id))
        return Outcome(None, "", False)

    def _pause(self, turn: Turn, progress: Progress, log: Any, prepared: PreparedTurn) -> Outcome:
        """Store the call waiting for approval and the conversation so far, then tell the sink
        (``approval_required``, then the ``awaiting_approval`` error that ends this stream)."""
        if not turn.draft.finish(TurnState.AWAITING_APPROVAL):
            return Outcome(None, turn.draft.text(), False, prepared)  # shutdown ended it first
        try:
            approval = retried(
                lambda: self._book.pause(
                    self._persona.name, self._channel, turn.message_id, turn.request_id, turn.user, progress
                ),
                turn.draft.cancel,
                log,
                "approval",
            )
        except StoreError as exc:  # the message stays pending: answered afresh after a restart
            log.error("approval_not_stored", error=exc.message)
            why = f"a tool call needs an owner's approval, which could not be stored ({exc.message})"
            turn.sink(Error(ErrorCode.STORE_ERROR, why, turn.message_id))
            return Outcome(None, turn.draft.text(), False, prepared)
        metrics.turn_ended(self._persona.name, TurnState.AWAITING_APPROVAL)
        log.info("turn", outcome="awaiting_approval", approval_id=approval.id, tool=approval.tool)
        call = progress.calls[0]
        turn.sink(
            ApprovalRequired(
                approval.id,
                call.name,
                _shown_arguments(call),
                turn.user,
                self._persona.name,
                self._channel,
                turn.message_id,
                approval.expires_at.isoformat().replace("+00:00", "Z"),
            )
        )
        why = (
            f"the call to {call.name} waits for an owner's approval (id {approval.id}); the reply follows the decision"
        )
        turn.sink(Error(ErrorCode.AWAITING_APPROVAL, why, turn.message_id))
        return Outcome(None, turn.draft.text(), False, prepared)

    def model_rounds(
        self,
        turn: Turn,
        prepared: PreparedTurn,
        chain: tuple[str, ...] = (),
        resume: tuple[Progress, Decided] | None = None,
    ) -> Rounds:
        """Stream the model on the prepared prompt; run the tools it calls and stream it again, for
        at most ``[runtime] max_tool_rounds`` rounds with tools (the last round is offered none).

        A call to a tool that needs an owner's approval stops the rounds (``Rounds.paused``: the
        conversation so far, to store). ``resume``: go on from a stored conversation, whose first
        pending call was decided."""
        cfg = self._config
        tools = [] if turn.disable_tools else prepared.registry.tool_definitions()
        progress = resume[0] if resume else Progress(list(prepared.context.for_llm()))
        first_text: list[float] = []

        def on_text(text: str) -> None:
            if not first_text:
                first_text.append(time.perf_counter())
            turn.draft.append(text)
            turn.sink(TokenDelta(text=text))

        caller = self._caller(turn, prepared, chain)
        model_started = time.perf_counter()
        if resume is not None:
            turn.draft.append(progress.text)
            self._apply(resume[1], progress, prepared.registry, caller, turn)
        while True:
            while progress.calls:
                call = progress.calls[0]
                if prepared.registry.needs_approval(call.name) and not chain:
                    progress.text = turn.draft.text()
                    return Rounds(progress.usage, tuple(progress.tools), progress.rounds, 0.0, paused=progress)
                progress.calls.pop(0)
                if prepared.registry.needs_approval(call.name):  # a delegated task cannot pause
                    progress.messages.append(self._deny_tool(call, turn, progress.tools, None, _NO_WAIT))
                    continue
                progress.messages.append(self._run_tool(call, prepared.registry, caller, turn, progress.tools))
            offer = tools if progress.rounds < cfg.runtime.max_tool_rounds else []
            settings = self._settings()
            result = self._llm.stream(settings, progress.messages, offer, on_text, should_stop=turn.draft.cancel.is_set)
            progress.usage += result.usage
            progress.rounds += 1
            if result.interrupted:
                return Rounds(progress.usage, tuple(progress.tools), progress.rounds, 0.0, interrupted=True)
            if not result.tool_calls or not offer:
                break
            progress.messages.append(_assistant_with_calls(result.text, result.tool_calls))
            progress.calls = list(result.tool_calls)
        first_ms = (first_text[0] - model_started) * 1000 if first_text else 0.0
        elapsed = (time.perf_counter() - model_started) * 1000
        return Rounds(progress.usage, tuple(progress.tools), progress.rounds, elapsed, False, first_ms)

    def _caller(self, turn: Turn, prepared: PreparedTurn, chain: tuple[str, ...]) -> SkillCaller:
        """Who calls the turn's tools: always the person who started the turn (a tool's answer that
        asks for another call gets no more rights than they have)."""
        shared = prepared.visibility is not None and not prepared.visibility.private_to(turn.user)
        return SkillCaller(
            self._persona.name,
            self._channel,
            turn.user,
            turn.message_id,
            chain or (self._persona.name,),
            shared_channel=self._channel if shared else None,
        )

    def _apply(
        self, decided: Decided, progress: Progress, registry: SkillRegistry, caller: SkillCaller, turn: Turn
    ) -> None:
        """The decided call (``progress.calls[0]``): run if approved, else the denial the model sees;
        the decision is marked used before the turn goes on."""
        call = progress.calls.pop(0)
        approval = decided.approval
        if decided.approved:
            message = self._run_tool(call, registry, caller, turn, progress.tools, approval)
        else:
            message = self._deny_tool(call, turn, progress.tools, approval, decided.denial(self._book.timeout))
        progress.messages.append(message)
        self._book.used(approval.id)

    def store(self, turn: Turn, prepared: PreparedTurn, rounds: Rounds, log: Any, started: float) -> Outcome:
        """Store the reply and its context record, then send ``done`` (one call, one transaction)."""
        ctx, retrieval = prepared.context, prepared.retrieval
        record = context_record(
            turn.request_id, turn.user, prepared, rounds.usage.as_json(), rounds.tools, rounds.count
        )
        if not turn.draft.finish(TurnState.ANSWERED):
            metrics.turn_ended(self._persona.name, TurnState.INTERRUPTED)
            return Outcome(None, turn.draft.text(), False, prepared)  # shutdown stored it as interrupted
        text = turn.draft.text()
        summary = next((m.content for m in ctx.messages if m.source == "user_history"), None)
        store_started = time.perf_counter()
        try:
            reply = FinishedReply(text, record, summary)
            pass_on = self._pass_on(turn, text)
            stored = retried(
                lambda: self._writer.answered(
                    self._persona, self._channel, turn.message_id, reply, turn.user, pass_on=pass_on
                ),
                turn.draft.cancel,
                log,
                "reply",
            )
        except AlreadyAnswered:
            # Another process answered this message first (several daemons on one PostgreSQL, or a
            # worker whose daemon was killed, and the restarted daemon): its reply stands, this one
            # is dropped, and the turn ends without a second answer.
            log.warning("turn_already_answered")
            metrics.turn_ended(self._persona.name, TurnState.INTERRUPTED)
            turn.sink(Error(ErrorCode.INTERRUPTED, "another process answered this message first", turn.message_id))
            return Outcome(None, text, False, prepared)
        except StoreError as exc:
            return self._unstored(turn, exc, log, prepared)
        store_ms = (time.perf_counter() - store_started) * 1000
        reply_id = stored.reply_id
        if stored.stopped:
            self._stopped(turn, stored.stopped, log)
        turn.sink(Done(reply_id, turn.message_id, rounds.usage.as_json(), ctx.budget.as_json(), text, stored.triggered))
        log.info(
            "turn",
            outcome="answered",
            reply_id=reply_id,
            memories=len(ctx.memories),
            retrieval=retrieval.status,
            retrieval_ms=round(retrieval.elapsed_ms, 1),
            history_ms=round(prepared.stages.history_ms, 1),
            assemble_ms=round(prepared.stages.assemble_ms, 1),
            model_ms=round(rounds.model_ms, 1),
            store_ms=round(store_ms, 1),
            prompt_tokens=ctx.budget.total_tokens,
            history_messages=ctx.budget.history_messages,
            rounds=rounds.count,
            tools=[t.name for t in rounds.tools],
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        _count_answered(self._persona.name, prepared, rounds, store_ms)
        return Outcome(reply_id, text, True, prepared)

    def _pass_on(self, turn: Turn, text: str) -> PassOn | None:
        """In a room: who answers the same message after this persona, and whom its reply calls on."""
        entry = room_of(self._config, self._channel)
        if entry is None:
            return None
        room = turn.room
        called = tuple(called_on(entry, self._persona.name, text))
        if not room.queue and not called:
            return None
        source = room.source if room.source is not None else turn.message_id
        return PassOn(
            room.queue,
            source,
            room.speaker or turn.user,
            turn.text,
            turn.user,
            room.hop,
            called,
            entry.max_persona_turns,
        )

    def _stopped(self, turn: Turn, stopped: tuple[str, ...], log: Any) -> None:
        """The reply named personas past ``max_persona_turns``: the chain stops here, visibly."""
        entry = room_of(self._config, self._channel)
        bound = entry.max_persona_turns if entry is not None else 0
        log.info("persona_turns_stopped", personas=list(stopped), max_persona_turns=bound)
        metrics.persona_turns_stopped(self._persona.name, len(stopped))
        turn.sink(PersonaTurnsStopped(stopped, bound, turn.message_id))

    def _prepare(self, turn: Turn, memory_limit: int | None, memory_budget: int | None) -> PreparedTurn:
        """The turn prepared (under a slot), once the spend caps allow it (:mod:`agentd.spend.caps`: checked
        before anything is recalled, so a refused turn costs one read); on failure ``memory_context``
        still goes out first."""
        try:
            self._preparer.caps.check(self._persona, turn.user)
            with self._slots:
                return self._preparer.prepare(
                    self._persona,
                    self._channel,
                    turn.user,
                    turn.text,
                    message_id=turn.message_id,
                    disable_memory=turn.disable_memory,
                    memory_limit=memory_limit,
                    memory_budget=memory_budget,
                    room=turn.room,
                )
        except AgentdError:
            # memory_context is always a turn's first event, whatever happens after.
            turn.sink(MemoryContext((), RecallStatus.OK, turn.message_id))
            raise
        except Exception:
            # A bug: the actor crashes and the supervisor ends the turn, after this event.
            turn.sink(MemoryContext((), RecallStatus.ERROR, turn.message_id))
            raise

    def _announce(self, turn: Turn, prepared: PreparedTurn, log: Any) -> None:
        """``memory_context`` then ``history_context``: what the prompt carries."""
        retrieval, ctx = prepared.retrieval, prepared.context
        if retrieval.status not in (RecallStatus.OK, RecallStatus.DISABLED):
            log.info("retrieval_skipped", status=retrieval.status, reason=retrieval.reason)
        metrics.recalled(
            self._persona.name, retrieval.status, len(ctx.memories), len(ctx.episodes), len(retrieval.near_misses)
        )
        # What the user sees is what the prompt carries (the assembler may drop some).
        turn.sink(
            MemoryContext(
                tuple(_snippet(h) for h in ctx.memories),
                retrieval.status,
                turn.message_id,
                tuple(_snippet(h) for h in retrieval.near_misses),
                tuple(_snippet(h) for h in ctx.episodes),
            )
        )
        turn.sink(_history_event(prepared.recalled, ctx.user_history, prepared.history_status))

    def _settings(self) -> ModelSettings:
        """How to call this persona's model."""
        cfg = self._config
        return ModelSettings(
            model=self._persona.model,
            max_tokens=self._persona.max_reply_tokens,
            temperature=self._persona.temperature,
            api_base=self._persona.api_base,
            api_key_env=self._persona.api_key_env,
            timeout=self._persona.model_timeout_seconds or cfg.models.llm_timeout_seconds,
            retries=cfg.models.retries,
            retry_backoff=cfg.models.retry_backoff_seconds,
            retry_max_wait=cfg.models.retry_max_wait_seconds,
            persona=self._persona.name,
        )

    def _run_tool(
        self,
        call: ToolCallRequest,
        registry: SkillRegistry,
        caller: SkillCaller,
        turn: Turn,
        tool_log: list[ToolUse],
        approval: Approval | None = None,
    ) -> dict[str, Any]:
        shown = _shown_arguments(call)
        turn.sink(ToolCall(call.id, call.name, shown))
        try:
            result = registry.execute(call.name, call.arguments, caller)
            turn.sink(ToolResult(call.id, call.name, result=result))
            payload: dict[str, Any] = result
            tool_log.append(ToolUse(call.name, shown, True))
            outcome = "ok"
        except SkillError as exc:
            error = {"code": str(exc.code), "message": exc.message}
            turn.sink(ToolResult(call.id, call.name, error=error))
            payload = {"error": error}
            tool_log.append(ToolUse(call.name, shown, False, error))
            outcome = "error"
        content = data_json(payload)  # data, never a heading or a role
        self._audit(call, turn, outcome, content, approval)
        if len(content) > MAX_TOOL_RESULT_CHARS:
            content = content[:MAX_TOOL_RESULT_CHARS] + " …[tool result truncated]"
        return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}

    def _deny_tool(
        self, call: ToolCallRequest, turn: Turn, tool_log: list[ToolUse], approval: Approval | None, why: str
    ) -> dict[str, Any]:
        """A call an owner denied (or nobody approved in time, or a delegated task asked for one that
        needs approval): never run; the model is told why."""
        error = {"code": str(ErrorCode.APPROVAL_DENIED), "message": why}
        turn.sink(ToolCall(call.id, call.name, _shown_arguments(call)))
        turn.sink(ToolResult(call.id, call.name, error=error))
        tool_log.append(ToolUse(call.name, _shown_arguments(call), False, error))
        content = data_json({"error": error})
        self._audit(call, turn, "denied", content, approval)
        return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}

    def _audit(self, call: ToolCallRequest, turn: Turn, outcome: str, result: str, approval: Approval | None) -> None:
        """Keep the call in the audit trail; a store that refuses it does not fail the turn (logged)."""
        try:
            self._book.record(
                persona=self._persona.name,
                channel=self._channel,
                message_id=turn.message_id,
                asked_by=turn.user,
                tool=call.name,
                arguments=call.arguments or "{}",
                approval=approval.state if approval is not None else "none",
                approval_id=approval.id if approval is not None else None,
                decided_by=approval.decided_by if approval is not None else None,
                outcome=outcome,
                result=result,
            )
        except StoreError as exc:
            get_logger("agentd.turn").error("tool_call_not_audited", tool=call.name, store_error=exc.message)

    def _end(
        self,
        turn: Turn,
        code: ErrorCode,
        message: str,
        log: Any,
        prepared: PreparedTurn | None,
        *,
        resume: bool = False,
        refused: BudgetExceeded | None = None,
    ) -> Outcome:
        """End the turn with an Error event; keep any partial reply as ``interrupted``
        (``resume``: the message stays pending, see :meth:`TurnWriter.ended`; ``refused``: the cap
        the turn would have passed, named in the event).

        The outcome is stored before the client hears of it. When it cannot be
        stored, the client is told what the store says: the message is still
        pending, and is answered again after the daemon restarts.
        """
        state = TurnState.INTERRUPTED if code is ErrorCode.INTERRUPTED else TurnState.FAILED
        finished = turn.draft.finish(state)
        metrics.turn_ended(self._persona.name, state if finished else TurnState.INTERRUPTED)
        if not finished:
            # Shutdown ended the turn first: it stored the outcome and told the sink.
            return Outcome(None, turn.draft.text(), False, prepared)
        try:
            partial_id, triggered = self._writer.ended_passing_on(
                self._persona.name,
                self._channel,
                turn.message_id,
                turn.request_id,
                state,
                turn.draft.text(),
                resume=resume,
                pass_on=self._pass_on(turn, ""),
            )
        except StoreError as exc:
            log.error("turn_outcome_not_stored", code=code, error=message, store_error=exc.message)
            if not resume and not turn.draft.cancel.is_set():
                self._unsettled.add(turn.message_id)
            turn.sink(Error(ErrorCode.STORE_ERROR, _still_pending(message, exc), turn.message_id))
            return Outcome(None, turn.draft.text(), False, prepared)
        # Logged before the client hears of it: a caller that has the error has the log line too
        # (a test's captured output, rather than whatever runs after it).
        level = log.info if code in _QUIET_CODES else log.warning
        level(
            "turn",
            outcome="error",
            code=code,
            error=message,
            model=self._persona.model,
            api_base=self._persona.api_base,
        )
        cap = {"cap": refused.cap, "resets_at": refused.resets_at} if refused is not None else {}
        turn.sink(Error(code, message, turn.message_id, partial_id, **cap, triggered=triggered))
        return Outcome(partial_id, turn.draft.text(), False, prepared)

    def _settled(self, turn: Turn, log: Any) -> bool:
        """Before a turn starts: the earlier messages of the channel whose outcome the store refused
        are marked failed. False when the store still refuses: this message is not answered either
        (it joins them), so none is left pending while a later one is answered."""
        why = self._unsettled.settle(self._mark_failed)
        if why is None:
            return True
        turn.draft.finish(TurnState.FAILED)
        self._unsettled.add(turn.message_id)
        log.error("turn_not_started", reason="store_unwritable", store_error=why)
        turn.sink(MemoryContext((), RecallStatus.OK, turn.message_id))  # always a turn's first event
        message = (
            f"the store cannot be written ({why}) and an earlier message of this channel is still "
            "unsettled: this one is not answered before it (marked failed once the store takes writes)"
        )
        turn.sink(Error(ErrorCode.STORE_ERROR, message, turn.message_id))
        return False

    def _mark_failed(self, message_id: int) -> None:
        self._writer.ended(self._persona.name, self._channel, message_id, "", TurnState.FAILED, "")

    def _unstored(self, turn: Turn, exc: StoreError, log: Any, prepared: PreparedTurn) -> Outcome:
        """The finished reply could not be stored, even after :data:`~agentd.runtime.pipeline.retry.PAUSES`:
        mark the message failed if the store lets us (else it is marked failed before the channel's
        next message is answered; a restart first answers it), and say which."""
        log.error("reply_not_stored", error=exc.message)
        metrics.turn_ended(self._persona.name, TurnState.FAILED)
        why = f"the reply could not be stored ({exc.message})"
        try:
            self._mark_failed(turn.message_id)
        except StoreError as again:
            if not turn.draft.cancel.is_set():  # shutdown: it stays pending, answered after restart
                self._unsettled.add(turn.message_id)
            turn.sink(Error(ErrorCode.STORE_ERROR, _still_pending(why, again), turn.message_id))
        else:
            turn.sink(Error(ErrorCode.STORE_ERROR, f"{why}; the message is marked failed", turn.message_id))
        return Outcome(None, turn.draft.text(), False, prepared)


def _count_answered(persona: str, prepared: PreparedTurn, rounds: Rounds, store_ms: float) -> None:
    """The metrics of an answered turn: its status and the stages its ``turn`` log line times."""
    metrics.turn_ended(persona, TurnState.ANSWERED)
    stages = prepared.stages
    metrics.turn_stages(
        stages.history_ms,
        prepared.retrieval.elapsed_ms,
        stages.assemble_ms,
        rounds.first_token_ms,
        rounds.model_ms,
        store_ms,
    )


#: What a delegated task's call to a tool that needs approval is answered (it cannot pause).
_NO_WAIT = "this tool needs an owner's approval for each call, which a delegated task cannot wait for"

#: Turn errors that are part of normal operation (logged at info; the rest at warning).
_QUIET_CODES = frozenset({ErrorCode.INTERRUPTED, ErrorCode.CONTEXT_OVERFLOW, ErrorCode.BUDGET_EXCEEDED})


def _still_pending(why: str, exc: StoreError) -> str:
    return (
        f"{why}; its outcome could not be stored either ({exc.message}): the message stays pending, "
        "marked failed before the channel's next message is answered (or answered again after a restart)"
    )


def _snippet(hit: Any) -> MemorySnippet:
    m = hit.memory
    return MemorySnippet(m.text, m.category, round(hit.score, 4), round(hit.relevance, 4), m.id, str(m.scope))


def _history_event(recalled: EarlierRecall, kept: Sequence[Any], status: RecallStatus) -> HistoryContext:
    """The exchanges that made it into the prompt, and the seeds."""
    in_prompt = {s.message_ids[0] for s in kept}
    return HistoryContext(
        tuple(
            HistorySnippet(e.message_id, e.user_text, e.reply_text)
            for e in recalled.exchanges
            if e.message_id in in_prompt
        ),
        recalled.seeds,
        status,
    )


def _shown_arguments(call: ToolCallRequest) -> dict[str, Any]:
    """A call's arguments as its events show them (``{"_raw": ...}`` when not a JSON object)."""
    try:
        shown = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return {"_raw": call.arguments}
    return shown if isinstance(shown, dict) else {"_raw": call.arguments}


def _assistant_with_calls(text: str, calls: Sequence[ToolCallRequest]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ],
    }
