"""Facts extracted from each exchange by a model, kept current (``[memory] extract = "model"``).

After an exchange, a background job (:class:`agentd.memory.background.JobWorker`)
asks a model for the durable facts the user's message states, in one call that
also carries the user's most similar stored memories (mem0's design, folded into
one call: the model extracts and decides at once). Each fact comes back as one
decision about the user's own scope:

- ``ADD``: a new memory;
- ``UPDATE``: memory N now reads differently ("I moved to Berlin" turns "Lives in
  Paris" into "Lives in Berlin"); its old text is kept in its history;
- ``DELETE``: memory N is contradicted and nothing replaces it;
- ``NONE``: memory N already says it.

Every decision is recorded with the model's reason in ``memory_history``
(``agentd memory history ID``). Candidates come only from the user's own scope,
and a decision may only name one of them, so nothing crosses users. The persona's
reply is not given to the model unless ``extract_from = "exchange"``. Cost: one
model call per exchange, at most ``extract_per_minute`` (later ones wait; none is
skipped). The changes and the job's cursor are written in one transaction: an
exchange is extracted once, even across a crash (its model call may be made again).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from agentd._exceptions import BudgetExceeded, InvalidInput, NotFound
from agentd.access.scopes import Reach, Scope
from agentd.config import MemoryConfig
from agentd.llm.chat import ChatModel, ModelSettings, Usage
from agentd.memory.episodes import Exchange, exchanges
from agentd.memory.service import MemoryService
from agentd.observe.log import get_logger
from agentd.search import SearchQuery
from agentd.search.subjects import indexed_text
from agentd.spend.caps import SpendCaps, day_of
from agentd.store import Store
from agentd.store.memories import Memory, NewMemory
from agentd.store.spend import Spent

log = get_logger("agentd.extract")

#: The background job's name (its cursors in ``job_cursors``).
JOB = "extract"
Event = Literal["ADD", "UPDATE", "DELETE", "NONE"]
EVENTS: tuple[str, ...] = ("ADD", "UPDATE", "DELETE", "NONE")
#: Categories an extracted fact may have (anything else becomes ``fact``).
CATEGORIES = ("fact", "preference", "profile")

SYSTEM_PROMPT = """You keep a user's long-term memory.
From the user's new message, take the durable facts about the user and their world \
(preferences, plans, relationships, biography, possessions, places, dates), each as one short \
third-person sentence ("Lives in Berlin"). Compare each fact with the user's stored memories, \
listed by number, and decide:
- ADD: a new fact;
- UPDATE: it changes or refines memory N: give N and the full new text;
- DELETE: it contradicts memory N and nothing replaces it: give N;
- NONE: memory N already says it: give N.
Greetings, questions, small talk and anything said about the assistant are not facts.
Answer with JSON only, in this shape:
{"memories": [{"event": "ADD", "id": null, "text": "...", "category": "fact", "reason": "..."}]}
category is one of fact, preference, profile. No facts: {"memories": []}"""


@dataclass(frozen=True)
class Decision:
    """One parsed decision of the model."""

    event: Event
    text: str
    reason: str
    category: str = "fact"
    #: The candidate it names (1-based number in the prompt), for UPDATE, DELETE and NONE.
    number: int | None = None


def parse_decisions(raw: str) -> list[Decision]:
    """The decisions in a model's answer; malformed entries are left out (raises :class:`InvalidInput`
    when the answer holds no JSON object at all)."""
    text = raw.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1).strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        try:
            data = json.loads(text[start : end + 1]) if 0 <= start < end else None
        except json.JSONDecodeError:
            data = None
    if not isinstance(data, dict) or not isinstance(data.get("memories", []), list):
        raise InvalidInput("extraction", f"the model's answer is not the JSON asked for: {raw[:200]!r}")
    found: list[Decision] = []
    for item in data.get("memories", []):
        if not isinstance(item, dict):
            continue
        event = str(item.get("event", "")).upper()
        if event not in EVENTS:
            continue
        number = item.get("id")
        if isinstance(number, str) and number.strip().isdigit():
            number = int(number)
        if not isinstance(number, int) or isinstance(number, bool):
            number = None
        text_value = item.get("text")
        fact = text_value.strip() if isinstance(text_value, str) else ""
        category = str(item.get("category") or "fact").strip().lower()
        reason = item.get("reason")
        found.append(
            Decision(
                event,  # type: ignore[arg-type]
                fact,
                reason.strip() if isinstance(reason, str) else "",
                category if category in CATEGORIES else "fact",
                number,
            )
        )
    return found


class RateLimit:
    """At most ``per_minute`` starts a minute, evenly spaced; :meth:`wait` can be interrupted."""

    def __init__(self, per_minute: int, stop: threading.Event) -> None:
        self._interval = 60.0 / per_minute
        self._next = 0.0
        self._stop = stop

    def wait(self) -> bool:
        """Wait for the next slot; False if stopped meanwhile."""
        delay = self._next - time.monotonic()
        if delay > 0 and self._stop.wait(delay):
            return False
        self._next = max(self._next, time.monotonic()) + self._interval
        return not self._stop.is_set()


class Extractor:
    """Extracts facts from one channel's exchanges, one exchange (one model call) at a time."""

    def __init__(
        self,
        store: Store,
        memory: MemoryService,
        llm: ChatModel,
        config: MemoryConfig,
        settings_for: Callable[[str], ModelSettings | None],
        stop: threading.Event,
        caps: SpendCaps | None = None,
    ) -> None:
        """``caps``: the spend caps an extraction call counts toward and respects (none: unchecked)."""
        self._store = store
        self._caps = caps
        self._memory = memory
        self._llm = llm
        self._config = config
        self._settings_for = settings_for
        self._stop = stop
        self._limit = RateLimit(config.extract_per_minute, stop)

    def index(self, channel: str, should_stop: Callable[[], bool] = lambda: False) -> int:
        """Extract from every exchange of ``channel`` not done yet; return how many were done.

        One exchange at a time: its model call, then its decisions and the cursor in one
        transaction. An exchange not to learn from (``disable_memory``, the offline model)
        only moves the cursor. A stopping daemon writes nothing more.
        """
        done = 0
        while not should_stop() and not self._stop.is_set():
            with self._store.read() as conn:
                start = self._store.cursors.get(conn, JOB, channel)
            batch, cursor = exchanges(self._store, channel, start, 1)
            if cursor == start:
                break
            exchange = batch[0] if batch else None
            settings = self._settings_for(exchange.reply.persona or exchange.reply.author) if exchange else None
            if exchange is None or settings is None or not self._wanted(exchange):
                self._advance(channel, start, cursor)  # failed, interrupted, or not to learn from
                continue
            if self._refused(exchange):
                break  # left for later: the cursor stays, and the next nudge or start tries again
            if not self._limit.wait():
                break
            candidates = self._candidates(exchange)
            decisions, usage = self._ask(settings, exchange, candidates)
            if self._stop.is_set():
                break  # the next start asks again
            spent = (settings.model, usage)
            if self._apply(channel, start, cursor, exchange, candidates, decisions, spent):
                done += 1
        return done

    # -- internals ---------------------------------------------------------------------

    def _refused(self, exchange: Exchange) -> bool:
        """True when a spend cap of the exchange's persona or user is reached today: no call is made."""
        persona = exchange.reply.persona or exchange.reply.author
        if self._caps is None:
            return False
        try:
            self._caps.check_named(persona, exchange.message.author)
        except BudgetExceeded as exc:
            log.info("extraction_refused", persona=persona, cap=exc.cap, resets_at=exc.resets_at)
            return True
        return False

    def _wanted(self, exchange: Exchange) -> bool:
        # Opting out of memory for a message opts out of learning from it too.
        return not exchange.message.options.get("disable_memory")

    def _candidates(self, exchange: Exchange) -> list[Memory]:
        persona = exchange.reply.persona or exchange.reply.author
        n = self._config.tuning.extract_candidates
        if not n or self._memory.embedder is None:
            return []
        scope = Scope.user(exchange.message.author)
        try:
            request = SearchQuery(
                exchange.message.content, Reach(persona, user=exchange.message.author), n, 0.0, scopes=[scope]
            )
            hits = self._memory.search(request).hits
        except (InvalidInput, NotFound):
            return []
        return [h.memory for h in hits]

    def _ask(
        self, settings: ModelSettings, exchange: Exchange, candidates: Sequence[Memory]
    ) -> tuple[list[Decision], Usage]:
        known = "\n".join(f"{i}. {m.text}" for i, m in enumerate(candidates, 1)) or "(none)"
        parts = [f"Stored memories of {exchange.message.author}:\n{known}"]
        parts.append(f"New message from {exchange.message.author}:\n{exchange.message.content}")
        if self._config.extract_from == "exchange":
            parts.append(f"Reply from {exchange.reply.author}:\n{exchange.reply.content}")
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]
        result = self._llm.stream(settings, messages, [], lambda _text: None, should_stop=self._stop.is_set)
        try:
            return parse_decisions(result.text), result.usage
        except InvalidInput as exc:
            log.warning("extraction_unreadable", message_id=exchange.message.id, error=exc.message)
            return [], result.usage

    def _advance(self, channel: str, start: int, cursor: int) -> None:
        with self._store.write() as conn:
            self._store.cursors.advance(conn, JOB, channel, start, cursor)

    def _writes(
        self, exchange: Exchange, candidates: Sequence[Memory], decisions: Sequence[Decision]
    ) -> list[tuple[Decision, Memory | None, NewMemory | None]]:
        """The decisions that can be applied: each with its target memory and its validated new text."""
        msg = exchange.message
        persona = exchange.reply.persona or exchange.reply.author
        scope = Scope.user(msg.author)
        writes: list[tuple[Decision, Memory | None, NewMemory | None]] = []
        for d in decisions:
            target = candidates[d.number - 1] if d.number is not None and 0 < d.number <= len(candidates) else None
            if d.event != "ADD" and target is None:
                log.info("extraction_decision_skipped", decision=d.event, number=d.number, reason="no such candidate")
                continue
            item = None
            if d.event in ("ADD", "UPDATE"):
                try:
                    item = self._memory.validate(
                        NewMemory(persona, scope, d.category, d.text, {"extracted_from": msg.id}, None, msg.id)
                    )
                except (InvalidInput, NotFound) as exc:
                    log.info("extraction_decision_skipped", decision=d.event, reason=str(exc))
                    continue
            writes.append((d, target, item))
        return writes

    def _apply(
        self,
        channel: str,
        start: int,
        cursor: int,
        exchange: Exchange,
        candidates: Sequence[Memory],
        decisions: Sequence[Decision],
        spent: tuple[str, Usage],
    ) -> bool:
        """Write the decisions and move the cursor in one transaction; False if another worker did it.
        ``spent``: the call's model and usage, noted on the reply's context record (``agentd usage``)."""
        msg = exchange.message
        persona = exchange.reply.persona or exchange.reply.author
        scope = Scope.user(msg.author)
        writes = self._writes(exchange, candidates, decisions)
        texts = [indexed_text(item.text, item.scope) for _d, _t, item in writes if item is not None]
        vecs = self._memory.embed_passages(texts)
        memories, history = self._store.memories, self._store.memory_history
        with self._store.write() as conn:
            # Compare-and-set first: another daemon on the same database may have done this one.
            if not self._store.cursors.advance(conn, JOB, channel, start, cursor):
                return False
            self._store.contexts.add_extraction(conn, exchange.reply.id, spent[0], spent[1].as_json())
            model, usage = spent
            day = day_of(datetime.now(UTC))
            self._store.spend.add(conn, [Spent(day, persona, msg.author, model, *usage.as_pair())])
            v = 0
            for d, target, item in writes:
                vec = None
                if item is not None:
                    vec = vecs[v : v + 1] if vecs is not None else None
                    v += 1

                def note(memory_id: int, event: str, old: str | None, new: str | None, reason: str = d.reason) -> None:
                    history.add(
                        conn,
                        memory_id=memory_id,
                        persona=persona,
                        scope=str(scope),
                        event=event,
                        old_text=old,
                        new_text=new,
                        reason=reason,
                        source_message_id=msg.id,
                    )

                if d.event == "ADD":
                    assert item is not None
                    ((mid, created),) = memories.add(conn, [item], vec)
                    event, old = ("ADD", None) if created else ("NONE", item.text)
                    note(mid, event, old, item.text)
                    continue
                assert target is not None
                if memories.get(conn, target.id) is None:
                    continue  # forgotten meanwhile
                if d.event == "UPDATE":
                    assert item is not None
                    same = memories.find(conn, persona, scope, item.text)
                    if same is not None and same != target.id:
                        # The new text is another memory already: the old one goes.
                        memories.delete(conn, target.id)
                        note(target.id, "DELETE", target.text, None)
                        continue
                    memories.update_text(conn, target.id, item.text, vec[0] if vec is not None else None)
                    note(target.id, "UPDATE", target.text, item.text)
                elif d.event == "DELETE":
                    memories.delete(conn, target.id)
                    note(target.id, "DELETE", target.text, None)
                else:
                    note(target.id, "NONE", None, target.text)
        log.info("facts_extracted", message_id=msg.id, decisions=[d.event for d, _t, _i in writes])
        return True
