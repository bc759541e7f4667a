"""What a turn writes to the store; the context record that says what a reply was given is in
:mod:`agentd.runtime.pipeline.context_record` (its names are importable from here too).

Every write of a turn goes through :class:`TurnWriter`: a user message accepted
(with its token count), a reply stored with its context record, a turn ended
early (its partial reply kept as ``interrupted``). The context record is a typed,
versioned :class:`ContextRecord`: written here and read back here (by
``agentd inspect`` and the API), never assembled by hand elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agentd.caps import day_of
from agentd.observe import tracing
from agentd.personas import Persona
from agentd.prompt.builder import ContextBuilder
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
from agentd.store import Store
from agentd.store.messages import Message
from agentd.store.spend import Spent

if TYPE_CHECKING:
    from sqlalchemy import Connection


@dataclass(frozen=True)
class Incoming:
    """A user message to accept (:meth:`TurnWriter.incoming`), its tokens already counted."""

    persona: str
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


@dataclass(frozen=True)
class Reply:
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
    reply: Reply
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


def _nothing(_reply_id: int, _then: None) -> None:
    pass


class TurnWriter:
    """The one place a turn's messages and outcome are written."""

    def __init__(self, store: Store, builder: ContextBuilder) -> None:
        self._store = store
        self._builder = builder
        # Replies finished at the same time share a transaction: a few statements whatever their
        # number, where each waited for the writer (and, under load, for the GIL at each statement).
        self._replies: GroupCommit[_Answer, int, None] = GroupCommit(
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
    ) -> Incoming:
        """A user message ready to store, its tokens counted (no store access: callers do this in parallel)."""
        tokens, counter = self._builder.count_message(persona, text)
        return Incoming(
            persona.name, channel, author, text, request_id, source, reply_to, options, tokens, counter, at, visibility
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
                "status": "pending",
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
        self, persona: Persona, channel: str, user_message_id: int, reply: Reply, user: str | None = None
    ) -> int:
        """Store the reply, its context record, the user message's new status and what it spent
        (``user``'s, toward the caps), in one transaction shared with the other replies stored at
        the same time (group commit); return its id."""
        tokens, counter = self._builder.count_message(persona, reply.text)
        answer = _Answer(persona.name, persona.model, channel, user_message_id, reply, tokens, counter, user)
        return self._replies.submit(answer, None)

    def _store_replies(self, answers: Sequence[_Answer]) -> list[int]:
        records = [a.reply.record.to_json() for a in answers]  # made before the write: writers wait
        with self._store.write() as conn:
            if self._store.capabilities.shared_by_daemons:
                # One at a time (batches of one there): a reply another daemon stored first is refused.
                return [self._store_reply(conn, a, r) for a, r in zip(answers, records, strict=True)]
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
        return replies

    def _store_reply(self, conn: Connection, answer: _Answer, record: dict[str, Any]) -> int:
        reply_id = self._store.messages.add(conn, **answer.reply_row(), channel_exists=True).id
        self._store.contexts.add(conn, **answer.context(reply_id, record))
        if answer.reply.user_history_summary is not None:
            self._store.messages.add(conn, **answer.summary_row(), channel_exists=True)
        self._store.messages.set_status(conn, answer.user_message_id, "answered")
        self._store.spend.add(conn, [answer.spent(day_of(datetime.now(UTC)))])
        return reply_id

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
            self._store.messages.set_status(conn, user_message_id, status)
        return partial_id


__all__ = [
    "ContextRecord",
    "HistoryInfo",
    "Incoming",
    "ProfileMemory",
    "RecalledMemory",
    "Reply",
    "RetrievalInfo",
    "ToolUse",
    "TurnWriter",
    "profile_memories",
    "quoted_message_ids",
    "recalled_episodes",
    "recalled_memories",
]
