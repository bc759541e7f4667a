"""respond(): answer one stored user message, end to end.

1. the user message is already stored (the runtime persists before dispatch);
2. the retrieval query is the recent trigger messages (the user's burst since the
   last reply);
3. embed once and search persona ∩ (channel ∪ global ∪ user); keep the top N
   above the threshold — best effort, within the timeout;
4. assemble the prompt under the window;
5. stream the model with tools, running tool calls for a bounded number of rounds;
6. store the reply and a context record (memories with scores, budget, usage).

Expected failures (LLM errors, an overflowing prompt, a store error) end the
turn with an ``Error`` event; anything else is a bug and escapes to the actor.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from agentd._exceptions import AgentdError, SkillError
from agentd.config import Config
from agentd.llm.chat import ChatModel, ModelSettings, ToolCallRequest, Usage
from agentd.memory import MemoryService
from agentd.personas import Persona, Personas
from agentd.prompt.builder import ContextBuilder
from agentd.prompt.user_history import HistoryRecall, UserHistory, normalise, seeded_query
from agentd.runtime.events import (
    Done,
    Error,
    HistoryContext,
    HistorySnippet,
    MemoryContext,
    MemorySnippet,
    TokenDelta,
    ToolCall,
    ToolResult,
)
from agentd.runtime.messages import Turn
from agentd.runtime.retrieval import Retrieval, Retriever
from agentd.scopes import Reach
from agentd.skills import Caller, build_registry
from agentd.skills.delegate import DelegateRunner
from agentd.store import Store

#: How many of the user's messages since the last reply make up the retrieval query.
TRIGGER_MESSAGES = 3
#: A tool result longer than this (characters) is cut before it goes back to the model.
MAX_TOOL_RESULT_CHARS = 16_000


@dataclass(frozen=True)
class Outcome:
    """How a turn ended."""

    reply_id: int | None
    text: str
    ok: bool


class Responder:
    """Answers turns for one persona in one channel. Plain object: the actor owns the thread."""

    def __init__(
        self,
        persona: Persona,
        channel: str,
        *,
        config: Config,
        store: Store,
        memory: MemoryService | None,
        retriever: Retriever,
        history: UserHistory,
        builder: ContextBuilder,
        llm: ChatModel,
        personas: Personas,
        delegate: DelegateRunner | None = None,
    ) -> None:
        self._persona = persona
        self._channel = channel
        self._config = config
        self._store = store
        self._memory = memory
        self._retriever = retriever
        self._history = history
        self._builder = builder
        self._llm = llm
        self._personas = personas
        self._delegate = delegate

    def respond(
        self,
        turn: Turn,
        *,
        chain: tuple[str, ...] = (),
        memory_limit: int | None = None,
        memory_budget: int | None = None,
    ) -> Outcome:
        """Answer ``turn``, emitting its events to ``turn.sink``."""
        log = structlog.get_logger("agentd.turn").bind(
            persona=self._persona.name, channel=self._channel, request_id=turn.request_id, message_id=turn.message_id
        )
        started = time.perf_counter()
        cfg = self._config
        try:
            query = self._query(turn)
            recalled = self._history.recall(self._channel, turn.user, query, turn.message_id)
            query = seeded_query(query, recalled, cfg.history.seed_sparse_below)
            retrieval = self._retriever.recall(
                query,
                Reach(self._persona.name, self._channel, turn.user),
                memory_limit or cfg.memory.top_k,
                enabled=cfg.memory.auto_retrieve and not turn.disable_memory,
            )
            if retrieval.status not in ("ok", "disabled"):
                log.info("retrieval_skipped", status=retrieval.status, reason=retrieval.reason)
            registry = build_registry(self._persona, self._memory, self._personas, self._delegate)
            tools = registry.tool_definitions()
            try:
                ctx = self._builder.build(
                    self._persona,
                    self._channel,
                    turn.text,
                    before_id=turn.message_id,
                    memories=retrieval.hits,
                    user_history=recalled.snippets(),
                    tools=tools,
                    memory_budget=memory_budget,
                )
            except AgentdError:
                turn.sink(MemoryContext((), retrieval.status, turn.message_id))
                raise
            # What the user sees is what the prompt carries (the assembler may drop some).
            turn.sink(MemoryContext(tuple(_snippet(h) for h in ctx.memories), retrieval.status, turn.message_id))
            if self._config.history.enabled:
                turn.sink(_history_event(recalled, ctx.user_history))
            messages: list[dict[str, Any]] = list(ctx.for_llm())
            settings = ModelSettings(
                model=self._persona.model,
                max_tokens=self._persona.max_tokens,
                temperature=self._persona.temperature,
                api_base=self._persona.api_base,
                api_key_env=self._persona.api_key_env,
                timeout=cfg.models.llm_timeout_seconds,
            )
            usage = Usage()
            tool_log: list[dict[str, Any]] = []
            rounds = 0

            def on_text(text: str) -> None:
                turn.draft.append(text)
                turn.sink(TokenDelta(text=text))

            skill_ctx = Caller(
                self._persona.name, self._channel, turn.user, turn.message_id, chain or (self._persona.name,)
            )
            while True:
                offer = tools if rounds < cfg.runtime.max_tool_rounds else []
                result = self._llm.stream(settings, messages, offer, on_text, should_stop=turn.draft.cancel.is_set)
                usage += result.usage
                rounds += 1
                if result.interrupted:
                    return self._fail(turn, "interrupted", "the daemon stopped before the reply was complete", log)
                if not result.tool_calls or not offer:
                    break
                messages.append(_assistant_with_calls(result.text, result.tool_calls))
                for call in result.tool_calls:
                    messages.append(self._run_tool(call, registry, skill_ctx, turn, tool_log))
            reply_id = self._store_reply(turn, ctx, retrieval, recalled, usage, tool_log, rounds)
            text = turn.draft.text()
            if reply_id is not None:
                turn.sink(Done(reply_id, turn.message_id, usage.as_json(), ctx.budget.as_json(), text))
            log.info(
                "turn",
                outcome="answered",
                reply_id=reply_id,
                memories=len(ctx.memories),
                retrieval=retrieval.status,
                retrieval_ms=round(retrieval.elapsed_ms, 1),
                prompt_tokens=ctx.budget.total_tokens,
                history_messages=ctx.budget.history_messages,
                rounds=rounds,
                tools=[t["name"] for t in tool_log],
                ms=round((time.perf_counter() - started) * 1000, 1),
            )
            return Outcome(reply_id, text, True)
        except AgentdError as exc:
            return self._fail(turn, exc.code, exc.message, log)

    # -- steps -----------------------------------------------------------------------

    def _query(self, turn: Turn) -> str:
        """The user's burst since the last reply, oldest first, ending with this message."""
        with self._store.read() as conn:
            earlier = self._store.messages.recent(conn, self._channel, TRIGGER_MESSAGES - 1, before_id=turn.message_id)
        burst: list[str] = []
        for msg in earlier:
            if msg.role != "user" or msg.author != turn.user:
                break
            burst.append(msg.content)
        return normalise(" ".join([*reversed(burst), turn.text]))

    def _run_tool(
        self,
        call: ToolCallRequest,
        registry: Any,
        ctx: Caller,
        turn: Turn,
        tool_log: list[dict[str, Any]],
    ) -> dict[str, Any]:
        try:
            shown = json.loads(call.arguments or "{}")
            if not isinstance(shown, dict):
                shown = {"_raw": call.arguments}
        except json.JSONDecodeError:
            shown = {"_raw": call.arguments}
        turn.sink(ToolCall(call.id, call.name, shown))
        try:
            result = registry.execute(call.name, call.arguments, ctx)
            turn.sink(ToolResult(call.id, call.name, result=result))
            payload: dict[str, Any] = result
            tool_log.append({"name": call.name, "arguments": shown, "ok": True})
        except SkillError as exc:
            error = {"code": exc.code, "message": exc.message}
            turn.sink(ToolResult(call.id, call.name, error=error))
            payload = {"error": error}
            tool_log.append({"name": call.name, "arguments": shown, "ok": False, "error": error})
        content = json.dumps(payload, ensure_ascii=False)
        if len(content) > MAX_TOOL_RESULT_CHARS:
            content = content[:MAX_TOOL_RESULT_CHARS] + " …[tool result truncated]"
        return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}

    def _store_reply(
        self,
        turn: Turn,
        ctx: Any,
        retrieval: Retrieval,
        recalled: HistoryRecall,
        usage: Usage,
        tool_log: Sequence[dict[str, Any]],
        rounds: int,
    ) -> int | None:
        """Store the reply, its context record and the user message's new status (one transaction)."""
        if not turn.draft.claim():
            return None  # shutdown already stored this reply as interrupted
        text = turn.draft.text()
        tokens, counter = self._builder.count_message(self._persona, text)
        with self._store.write() as conn:
            reply = self._store.messages.add(
                conn,
                channel=self._channel,
                role="assistant",
                author=self._persona.name,
                persona=self._persona.name,
                content=text,
                status="complete",
                source="reply",
                reply_to=turn.message_id,
                request_id=turn.request_id,
                token_count=tokens,
                token_counter=counter,
            )
            self._store.contexts.add(
                conn,
                reply_id=reply.id,
                user_message_id=turn.message_id,
                persona=self._persona.name,
                channel=self._channel,
                model=self._persona.model,
                data={
                    "request_id": turn.request_id,
                    "retrieval": {
                        "status": retrieval.status,
                        "ms": round(retrieval.elapsed_ms, 2),
                        "query": retrieval.query,
                        "reason": retrieval.reason,
                    },
                    "memories": [
                        {
                            "id": h.memory.id,
                            "text": h.memory.text,
                            "category": h.memory.category,
                            "scope": str(h.memory.scope),
                            "score": round(h.score, 4),
                            "relevance": round(h.relevance, 4),
                        }
                        for h in ctx.memories
                    ],
                    "budget": ctx.budget.as_json(),
                    "history_ids": list(ctx.history_ids),
                    "user_history": {
                        "inspected": recalled.inspected,
                        "seeds": list(recalled.seeds),
                        "message_ids": [i for s in ctx.user_history for i in s.message_ids],
                    },
                    "usage": usage.as_json(),
                    "tool_calls": list(tool_log),
                    "rounds": rounds,
                },
            )
            summary = next((m for m in ctx.messages if m.source == "user_history"), None)
            if summary is not None:
                # Stored with its tag so renderers can show what was recalled (never sent as history).
                self._store.messages.add(
                    conn,
                    channel=self._channel,
                    role="system",
                    author=self._persona.name,
                    persona=self._persona.name,
                    content=summary.content,
                    status="complete",
                    source="user_history",
                    reply_to=turn.message_id,
                    request_id=turn.request_id,
                )
            self._store.messages.set_status(conn, turn.message_id, "answered")
        return reply.id

    def _fail(self, turn: Turn, code: str, message: str, log: Any) -> Outcome:
        """End the turn with an Error event; keep any partial reply as ``interrupted``."""
        partial_id = None
        if turn.draft.claim():
            partial = turn.draft.text()
            with self._store.write() as conn:
                if partial:
                    partial_id = self._store.messages.add(
                        conn,
                        channel=self._channel,
                        role="assistant",
                        author=self._persona.name,
                        persona=self._persona.name,
                        content=partial,
                        status="interrupted",
                        source="reply",
                        reply_to=turn.message_id,
                        request_id=turn.request_id,
                    ).id
                self._store.messages.set_status(
                    conn, turn.message_id, "failed" if code != "interrupted" else "interrupted"
                )
        turn.sink(Error(code, message, turn.message_id, partial_id))
        log.info("turn", outcome="error", code=code, error=message)
        return Outcome(partial_id, turn.draft.text(), False)


def _snippet(hit: Any) -> MemorySnippet:
    m = hit.memory
    return MemorySnippet(m.text, m.category, round(hit.score, 4), round(hit.relevance, 4), m.id, str(m.scope))


def _history_event(recalled: HistoryRecall, kept: Sequence[Any]) -> HistoryContext:
    """The exchanges that made it into the prompt, and the seeds."""
    in_prompt = {s.message_ids[0] for s in kept}
    return HistoryContext(
        tuple(
            HistorySnippet(e.message_id, e.user_text, e.reply_text)
            for e in recalled.exchanges
            if e.message_id in in_prompt
        ),
        recalled.seeds,
    )


def _assistant_with_calls(text: str, calls: Sequence[ToolCallRequest]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ],
    }
