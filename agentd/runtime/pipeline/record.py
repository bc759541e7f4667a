"""What a turn writes to the store; the context record that says what a reply was given is in
:mod:`agentd.runtime.pipeline.context_record` (its names are importable from here too).

Every write of a turn goes through :class:`TurnWriter`: a user message accepted
(with its token count), a reply stored with its context record, a turn ended
early (its partial reply kept as ``interrupted``). The context record is a typed,
versioned :class:`ContextRecord`: written here and read back here (by
``agentd inspect`` and the API), never assembled by hand elsewhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agentd._exceptions import AlreadyAnswered
from agentd.observe import tracing
from agentd.personas import Persona
from agentd.prompt.builder import ContextBuilder
from agentd.runtime.events import Called
from agentd.runtime.group_commit import MAX_BATCH, GroupCommit
from agentd.runtime.messages import TurnState
from agentd.runtime.pipeline.context_record import (
    ContextRecord,
    HistoryInfo,
    ProfileMemory,
    RecalledMemory,
    RetrievalInfo,
    ToolUse,
    profile_memories,
    quoted_message_ids,
    recalled_episodes,
    recalled_memories,
)
from agentd.spend.caps import day_of
from agentd.store import Store
from agentd.store.messages import CHAIN_SOURCE, FOR_USER, QUEUE_SOURCE, TRIGGER, Message
from agentd.store.spend import Spent

if TYPE_CHECKING:
    from sqlalchemy import Connection


@dataclass(frozen=True)
class PassOn:
    """What a reply in a room passes on, stored in the reply's own transaction (so a crash keeps
    both or neither): the next persona that answers the same message, and the personas the reply
    calls on (each a stored ``trigger`` message, answered like a user message)."""

    #: The personas that answer the source message after this turn's, in order.
    queue: tuple[str, ...]
    #: The message they answer: its id, who said it and what.
    source_id: int
    source_author: str
    source_text: str
    #: The person the room is answering (whose memories the chain's turns may recall).
    user: str
    #: Persona-to-persona replies before this turn's in its chain.
    hop: int
    #: The personas this turn's reply named (the speaker left out), in order.
    called: tuple[str, ...] = ()
    #: ``[channels.NAME] max_persona_turns``.
    max_turns: int = 0


@dataclass(frozen=True)
class Stored:
    """A reply as stored: its id, the personas it called on (stored triggers, in order), and those
    it named past ``max_persona_turns`` (not called on)."""

    reply_id: int
    triggered: tuple[Called, ...] = ()
    stopped: tuple[str, ...] = ()
    #: Not stored: the message had a complete reply already (another process answered it first).
    refused: bool = False


@dataclass(frozen=True)
class Incoming:
    """A user message to accept (:meth:`TurnWriter.incoming`), its tokens already counted."""

    #: The persona that answers it first (``None``: nobody is asked to, a room's message that
    #: names none with ``require_mention``; stored ``noted``).
    persona: str | None
    channel: str
    author: str
    text: str
    request_id: str
    source: str
    reply_to: int | None
    options: Mapping[str, Any] | None
    tokens: int
    counter: str
    #: When it was said (a replayed conversation); ``None``: now.
    at: datetime | None = None
    #: What the poster declared of the channel (``direct`` | ``shared``); ``None``: nothing.
    visibility: str | None = None

    @property
    def status(self) -> str:
        """``pending`` until answered; ``noted`` when nobody is asked to answer."""
        return "pending" if self.persona is not None else NOTED


@dataclass(frozen=True)
class FinishedReply:
    """A finished reply to store."""

    text: str
    record: ContextRecord
    #: The recalled-exchanges system message, stored tagged ``user_history`` for renderers.
    user_history_summary: str | None = None


@dataclass(frozen=True)
class _Answer:
    """A finished reply on its way to the store (:meth:`TurnWriter.answered`)."""

    persona: str
    model: str
    channel: str
    user_message_id: int
    reply: FinishedReply
    tokens: int
    counter: str
    #: Whose message it answers (``None``: nobody's), for the spend caps.
    user: str | None = None

    def spent(self, day: str) -> Spent:
        """What the reply's model calls used, as :mod:`agentd.store.spend` counts it toward the caps."""
        usage = self.reply.record.usage
        return Spent(
            day,
            self.persona,
            self.user or "",
            self.model,
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
        )

    pass_on: PassOn | None = None

    def reply_row(self) -> dict[str, Any]:
        """The reply, as :meth:`~agentd.store.messages.MessageRepo.add` takes it."""
        return {
            "channel": self.channel,
            "role": "assistant",
            "author": self.persona,
            "persona": self.persona,
            "content": self.reply.text,
            "status": "complete",
            "source": "reply",
            "reply_to": self.user_message_id,
            "request_id": self.reply.record.request_id,
            "token_count": self.tokens,
            "token_counter": self.counter,
        }

    def summary_row(self) -> dict[str, Any]:
        """The recalled-exchanges note, stored with its tag so renderers can show what was recalled
        (never sent as history)."""
        return {
            "channel": self.channel,
            "role": "system",
            "author": self.persona,
            "persona": self.persona,
            "content": self.reply.user_history_summary,
            "status": "complete",
            "source": "user_history",
            "reply_to": self.user_message_id,
            "request_id": self.reply.record.request_id,
        }

    def context(self, reply_id: int, record: dict[str, Any]) -> dict[str, Any]:
        """The context record's row, as :meth:`~agentd.store.contexts.ContextRepo.add` takes it."""
        return {
            "reply_id": reply_id,
            "user_message_id": self.user_message_id,
            "persona": self.persona,
            "channel": self.channel,
            "model": self.model,
            "data": record,
        }


def _nothing(_stored: Stored, _then: None) -> None:
    pass


#: The status of a person's message in a room that no persona is asked to answer.
NOTED = "noted"


def _trigger(
    persona: str, channel: str, author: str, text: str, source: str, options: dict[str, Any]
) -> dict[str, Any]:
    """A room's call on ``persona`` to answer ``text`` (said by ``author``), as ``add_many`` takes it."""
    return {
        "channel": channel,
        "role": TRIGGER,
        "author": author,
        "persona": persona,
        "content": text,
        "status": "pending",
        "source": source,
        "reply_to": options["source"],
        "request_id": uuid.uuid4().hex,
        "options": options,
    }


class TurnWriter:
    """The one place a turn's messages and outcome are written."""

    def __init__(self, store: Store, builder: ContextBuilder) -> None:
        self._store = store
        self._builder = builder
        # Replies finished at the same time share a transaction: a few statements whatever their
        # number, where each waited for the writer (and, under load, for the GIL at each statement).
        self._replies: GroupCommit[_Answer, Stored, None] = GroupCommit(
            self._store_replies, _nothing, max_batch=1 if store.capabilities.shared_by_daemons else MAX_BATCH
        )

    def incoming(
        self,
        persona: Persona,
        channel: str,
        author: str,
        text: str,
        *,
        request_id: str,
        source: str,
        reply_to: int | None = None,
        options: Mapping[str, Any] | None = None,
        at: datetime | None = None,
        visibility: str | None = None,
        noted: bool = False,
    ) -> Incoming:
        """A user message ready to store, its tokens counted (no store access: callers do this in parallel).
        ``noted``: nobody is asked to answer it (``persona`` only counts its tokens)."""
        tokens, counter = self._builder.count_message(persona, text)
        return Incoming(
            None if noted else persona.name,
            channel,
            author,
            text,
            request_id,
            source,
            reply_to,
            options,
            tokens,
            counter,
            at,
            visibility,
        )

    def accept(
        self,
        persona: Persona,
        channel: str,
        author: str,
        text: str,
        *,
        request_id: str,
        source: str,
        reply_to: int | None = None,
        options: Mapping[str, Any] | None = None,
        at: datetime | None = None,
        visibility: str | None = None,
    ) -> Message:
        """Store a user message (``pending``) with its token count; durable when this returns.

        ``at``: when it was said (a replayed conversation), default now. ``visibility``
        (``direct`` | ``shared``) is declared for the channel with the message unless the
        channel has one already (the first declaration stands).
        """
        item = self.incoming(
            persona,
            channel,
            author,
            text,
            request_id=request_id,
            source=source,
            reply_to=reply_to,
            options=options,
            at=at,
            visibility=visibility,
        )
        return self.accept_many([item])[0]

    def accept_many(self, items: Sequence[Incoming]) -> list[Message]:
        """Store user messages (``pending``) in one transaction, ids in the order given; durable
        when this returns (all of them, or none: a failure raises)."""
        with self._store.write() as conn:
            return self.accept_in(conn, items)

    def accept_in(self, conn: Connection, items: Sequence[Incoming]) -> list[Message]:
        """:meth:`accept_many` in the caller's write transaction (stored with what else it writes)."""
        rows = [
            {
                "channel": item.channel,
                "role": "user",
                "author": item.author,
                "persona": item.persona,
                "content": item.text,
                "status": item.status,
                "source": item.source,
                "request_id": item.request_id,
                "reply_to": item.reply_to,
                "token_count": item.tokens,
                "token_counter": item.counter,
                "options": item.options,
                "created_at": item.at,
            }
            for item in items
        ]
        for item in items:
            if item.visibility is not None:
                owner = item.author if item.visibility == "direct" else None
                self._store.messages.declare(conn, item.channel, item.visibility, owner)
        return self._store.messages.add_many(conn, rows)

    @tracing.spanned("store reply")
    def answered(
        self,
        persona: Persona,
        channel: str,
        user_message_id: int,
        reply: FinishedReply,
        user: str | None = None,
        *,
        pass_on: PassOn | None = None,
    ) -> Stored:
        """Store the reply, its context record, the user message's new status, what it spent
        (``user``'s, toward the caps) and what it passes on in a room (``pass_on``), in one
        transaction shared with the other replies stored at the same time (group commit)."""
        tokens, counter = self._builder.count_message(persona, reply.text)
        answer = _Answer(persona.name, persona.model, channel, user_message_id, reply, tokens, counter, user, pass_on)
        stored = self._replies.submit(answer, None)
        if stored.refused:
            raise AlreadyAnswered(user_message_id)
        return stored

    def _pass_on(self, conn: Connection, answer: _Answer, reply_id: int | None) -> Stored:
        """Store the triggers a reply passes on (see :meth:`_triggers`)."""
        return self._triggers(conn, answer.channel, answer.persona, answer.reply.text, answer.pass_on, reply_id)

    def _triggers(
        self, conn: Connection, channel: str, persona: str, text: str, f: PassOn | None, reply_id: int | None
    ) -> Stored:
        """Store the triggers a reply (``reply_id``, ``text``; ``None``: the turn failed) passes on: the
        next persona of the queue, then the personas it called on while the chain is under its bound."""
        if f is None:
            return Stored(reply_id or 0)
        rows: list[dict[str, Any]] = []
        if f.queue:
            options = {"queue": list(f.queue[1:]), "hop": f.hop, "source": f.source_id, FOR_USER: f.user}
            rows.append(_trigger(f.queue[0], channel, f.source_author, f.source_text, QUEUE_SOURCE, options))
        stopped: list[str] = []
        if f.called and reply_id is not None:
            length = self._store.messages.chain_length(conn, channel)
            for name in f.called:
                if length >= f.max_turns:
                    stopped.append(name)
                    continue
                length += 1
                options = {"hop": f.hop + 1, "source": reply_id, FOR_USER: f.user}
                rows.append(_trigger(name, channel, persona, text, CHAIN_SOURCE, options))
        stored = self._store.messages.add_many(conn, rows)
        triggered = tuple(Called(str(m.persona), m.id, int(m.options.get("hop", 0))) for m in stored)
        return Stored(reply_id or 0, triggered, tuple(stopped))

    def _store_replies(self, answers: Sequence[_Answer]) -> list[Stored]:
        records = [a.reply.record.to_json() for a in answers]  # made before the write: writers wait
        with self._store.write() as conn:
            if self._store.capabilities.shared_by_daemons:
                # One at a time (batches of one there): a reply another daemon stored first is refused.
                return [self._store_reply(conn, a, r) for a, r in zip(answers, records, strict=True)]
            # At most one complete reply per message, as PostgreSQL's unique index ensures there: a
            # worker process whose daemon was killed may finish a turn the restarted daemon resumed.
            # Writers queue on BEGIN IMMEDIATE, so what this reads cannot change before the commit.
            taken = set(self._store.messages.replies_to(conn, [a.user_message_id for a in answers], "complete"))
            fresh: list[int] = []
            for i, a in enumerate(answers):
                if a.user_message_id not in taken:
                    taken.add(a.user_message_id)
                    fresh.append(i)
            stored = self._store_batch(conn, [answers[i] for i in fresh], [records[i] for i in fresh])
            results = [Stored(0, refused=True)] * len(answers)
            for i, one in zip(fresh, stored, strict=True):
                results[i] = one
            return results

    def _store_batch(
        self, conn: Connection, answers: Sequence[_Answer], records: Sequence[dict[str, Any]]
    ) -> list[Stored]:
        """Store replies (none of whose messages has a complete reply yet) in a few statements."""
        if not answers:
            return []
        rows: list[dict[str, Any]] = []
        at: list[int] = []
        for a in answers:
            at.append(len(rows))
            rows.append(a.reply_row())
            if a.reply.user_history_summary is not None:
                rows.append(a.summary_row())
        stored = self._store.messages.add_many(conn, rows)
        replies = [stored[i].id for i in at]
        self._store.contexts.add_many(
            conn, [a.context(mid, r) for a, mid, r in zip(answers, replies, records, strict=True)]
        )
        self._store.messages.set_statuses(conn, [a.user_message_id for a in answers], "answered")
        self._store.spend.add(conn, [a.spent(day_of(datetime.now(UTC))) for a in answers])
        return [self._pass_on(conn, a, mid) for a, mid in zip(answers, replies, strict=True)]

    def _store_reply(self, conn: Connection, answer: _Answer, record: dict[str, Any]) -> Stored:
        reply_id = self._store.messages.add(conn, **answer.reply_row(), channel_exists=True).id
        self._store.contexts.add(conn, **answer.context(reply_id, record))
        if answer.reply.user_history_summary is not None:
            self._store.messages.add(conn, **answer.summary_row(), channel_exists=True)
        self._store.messages.set_status(conn, answer.user_message_id, "answered")
        self._store.spend.add(conn, [answer.spent(day_of(datetime.now(UTC)))])
        return self._pass_on(conn, answer, reply_id)

    def ended(
        self,
        persona: str,
        channel: str,
        user_message_id: int,
        request_id: str,
        state: TurnState,
        partial: str,
        *,
        resume: bool = False,
    ) -> int | None:
        """A turn ended without a complete reply: keep what was streamed as ``interrupted``, set the
        user message's status (``failed`` or ``interrupted``); return the partial reply's id.

        ``resume``: leave the message ``pending`` instead (a turn shutdown cut: it is answered after
        the next start, its partial reply kept before the answer)."""
        return self.ended_passing_on(persona, channel, user_message_id, request_id, state, partial, resume=resume)[0]

    def ended_passing_on(
        self,
        persona: str,
        channel: str,
        user_message_id: int,
        request_id: str,
        state: TurnState,
        partial: str,
        *,
        resume: bool = False,
        pass_on: PassOn | None = None,
    ) -> tuple[int | None, tuple[Called, ...]]:
        """:meth:`ended`; in a room, a failed turn (not one to resume) still passes the message on to
        the persona queued after it (stored in the same transaction): the partial reply's id, and
        that trigger."""
        status = "pending" if resume else state.value
        partial_id = None
        with self._store.write() as conn:
            if partial:
                partial_id = self._store.messages.add(
                    conn,
                    channel=channel,
                    role="assistant",
                    author=persona,
                    persona=persona,
                    content=partial,
                    status="interrupted",
                    source="reply",
                    reply_to=user_message_id,
                    request_id=request_id,
                    channel_exists=True,
                ).id
            # Never back from answered: a turn cut in a worker whose daemon was killed ends after the
            # restarted daemon has answered its message.
            self._store.messages.set_status(conn, user_message_id, status, unless="answered")
            queued = None if resume or pass_on is None else replace(pass_on, called=())
            triggered = self._triggers(conn, channel, persona, partial, queued, None).triggered
        return partial_id, triggered


__all__ = [
    "ContextRecord",
    "HistoryInfo",
    "NOTED",
    "Incoming",
    "PassOn",
    "ProfileMemory",
    "RecalledMemory",
    "FinishedReply",
    "RetrievalInfo",
    "Stored",
    "ToolUse",
    "TurnWriter",
    "profile_memories",
    "quoted_message_ids",
    "recalled_episodes",
    "recalled_memories",
]
