"""Approvals inside a turn, and the audit trail of its tool calls.

A call to a tool whose policy says ``approval = "required"`` pauses its turn durably
(:meth:`ApprovalBook.pause`): the pending call and the conversation so far
(:class:`Progress`) are stored in ``approvals`` with the user message's status set to
``awaiting_approval``, in one transaction. An owner's decision (or the timeout) makes the
turn's message ``pending`` again and re-enqueues it (:mod:`agentd.runtime.approvals`); the
resumed turn finds the decided approval at its start (:meth:`ApprovalBook.gate`) and goes on
from the stored conversation, with the tool's result or the denial.

Until then the channel's later messages for that persona wait (status ``held``): the
channel's actor does not answer them before the paused turn. Other channels do not wait.
Every call a model makes, run or denied, is kept in ``tool_calls`` (:meth:`ApprovalBook.record`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from agentd.llm.chat import ToolCallRequest, Usage
from agentd.runtime.pipeline.context_record import ToolUse
from agentd.store import Store
from agentd.store.schema import utcnow
from agentd.store.tools import Approval

#: The status of a user message whose turn waits for an owner's decision.
AWAITING = "awaiting_approval"
#: The status of a user message waiting behind a paused turn of its channel.
HELD = "held"


@dataclass
class Progress:
    """Where a turn's model-and-tool rounds are: what is stored to resume a paused turn."""

    messages: list[dict[str, Any]]
    usage: Usage = field(default_factory=Usage)
    tools: list[ToolUse] = field(default_factory=list)
    rounds: int = 0
    #: The current round's tool calls not run yet (the first: the one waiting for approval).
    calls: list[ToolCallRequest] = field(default_factory=list)
    #: The reply's text streamed so far.
    text: str = ""

    def to_json(self) -> str:
        """The stored form (what :meth:`from_json` reads)."""
        return json.dumps(
            {
                "messages": self.messages,
                "usage": {"prompt_tokens": self.usage.prompt_tokens, "completion_tokens": self.usage.completion_tokens},
                "tools": [{"name": t.name, "arguments": t.arguments, "ok": t.ok, "error": t.error} for t in self.tools],
                "rounds": self.rounds,
                "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.calls],
                "text": self.text,
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> Progress:
        """A stored progress."""
        data = json.loads(text)
        return cls(
            list(data["messages"]),
            Usage(**data.get("usage", {})),
            [ToolUse(**t) for t in data.get("tools", ())],
            int(data.get("rounds", 0)),
            [ToolCallRequest(**c) for c in data.get("calls", ())],
            str(data.get("text", "")),
        )


class Gate(StrEnum):
    """What a turn of a persona with approvals does when it starts."""

    #: Answer it as usual.
    GO = "go"
    #: Its own approval was decided: go on from the stored conversation.
    RESUME = "resume"
    #: Its own approval is still pending (routed twice): nothing to do yet.
    WAIT = "wait"
    #: An earlier message of the channel waits for approval: this one waits behind it.
    HOLD = "hold"
    #: Its message is not pending any more (answered already): nothing to do.
    SKIP = "skip"


@dataclass(frozen=True)
class Decided:
    """How a call that waited for approval was decided, as the resumed turn applies it."""

    approval: Approval

    @property
    def approved(self) -> bool:
        """True when an owner approved it."""
        return self.approval.state == "approved"

    def denial(self, timeout: float) -> str:
        """What the model (and so the person) is told of a denial."""
        a = self.approval
        if a.state == "expired":
            return f"no owner approved the call to {a.tool} within {timeout:g} s, so it was not run"
        why = f": {a.reason}" if a.reason else ""
        return f"an owner ({a.decided_by or 'an admin'}) denied the call to {a.tool}, so it was not run{why}"


class ApprovalBook:
    """The store's side of approvals and the audit trail, for the turns of one process."""

    def __init__(self, store: Store, timeout_seconds: float) -> None:
        self._store = store
        #: ``[tools] approval_timeout_seconds``.
        self.timeout = timeout_seconds

    def gate(self, persona: str, channel: str, message_id: int) -> tuple[Gate, Approval | None]:
        """What the turn answering ``message_id`` does first (see :class:`Gate`)."""
        store = self._store
        with store.read() as conn:
            status = store.messages.statuses(conn, [message_id]).get(message_id)
            holding = store.approvals.holding(conn, persona, channel, message_id)
            behind = holding is None and store.approvals.held_before(conn, persona, channel, message_id)
        if holding is not None and holding.message_id == message_id:
            return (Gate.RESUME if holding.state != "pending" else Gate.WAIT), holding
        if status not in ("pending", HELD):
            return Gate.SKIP, None
        return (Gate.HOLD, holding) if holding is not None or behind else (Gate.GO, None)

    def pause(
        self, persona: str, channel: str, message_id: int, request_id: str, user: str, progress: Progress
    ) -> Approval:
        """Store the call waiting for approval (``progress.calls[0]``) and the conversation so far;
        the message's status becomes ``awaiting_approval`` (one transaction)."""
        call = progress.calls[0]
        now = utcnow()
        values = {
            "persona": persona,
            "channel": channel,
            "message_id": message_id,
            "request_id": request_id,
            "tool": call.name,
            "call_id": call.id,
            "arguments": call.arguments or "{}",
            "asked_by": user,
            "resume": progress.to_json(),
            "created_at": now,
            "expires_at": now + timedelta(seconds=self.timeout),
        }
        with self._store.write() as conn:
            approval_id = self._store.approvals.add(conn, **values)
            self._store.messages.set_status(conn, message_id, AWAITING)
            found = self._store.approvals.get(conn, approval_id)
        assert found is not None
        return found

    def hold(self, message_id: int) -> None:
        """The message waits behind a paused turn of its channel (status ``held``)."""
        with self._store.write() as conn:
            self._store.messages.set_status(conn, message_id, HELD)

    def used(self, approval_id: int) -> None:
        """The resumed turn applied the decision (a later restart starts the turn afresh)."""
        with self._store.write() as conn:
            self._store.approvals.done(conn, approval_id, utcnow())

    def record(self, **values: Any) -> None:
        """Keep one tool call in the audit trail (``tool_calls``)."""
        with self._store.write() as conn:
            self._store.tool_calls.add(conn, created_at=utcnow(), **values)


__all__ = ["AWAITING", "HELD", "ApprovalBook", "Decided", "Gate", "Progress"]
