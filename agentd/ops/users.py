"""A person's data, defined once: ``user_export`` and ``user_forget``.

Reached by ``GET /v1/users/{user}/export`` and ``DELETE /v1/users/{user}``
(:mod:`agentd.api.users`) and ``agentd user export|forget`` (:mod:`agentd.cli.user`); admin only.
The user id is checked by :mod:`agentd.memory.people` (which also accepts an id stored before the
identifier rules tightened, so such a person can still be exported and erased).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from agentd.memory.people import export_user, forget_user
from agentd.ops.base import ADMIN, OpContext, Request, Result, operation
from agentd.ops.fields import MAX_NAME


class UserRequest(Request):
    """Whose data, and of which persona (default: every persona)."""

    user: str = Field(description="The user's id.")
    persona: str | None = Field(
        None, min_length=1, max_length=MAX_NAME, description="Only this persona's (default: every persona)."
    )


class UserExport(Result):
    """``GET /v1/users/{user}/export``: everything kept about a user (rows as stored, times in UTC)."""

    user: str
    persona: str | None
    memories: list[dict[str, Any]] = Field(description="Their memories, each with its ``history``.")
    episodes: list[dict[str, Any]] = Field(description="Their exchanges kept as episodes, each with its ``history``.")
    messages: list[dict[str, Any]] = Field(description="The messages they wrote.")
    replies: list[dict[str, Any]] = Field(description="The replies to those messages.")
    context_records: list[dict[str, Any]] = Field(description="What each of those replies was given.")
    tool_calls: list[dict[str, Any]] = Field(default_factory=list, description="The tool calls they triggered.")
    approvals: list[dict[str, Any]] = Field(
        default_factory=list, description="The approvals their tool calls asked for (with the paused conversation)."
    )
    schedules: list[dict[str, Any]] = Field(default_factory=list, description="The schedules made for them.")


class UserForgotten(Result):
    """``DELETE /v1/users/{user}``: what was erased (counts only)."""

    user: str
    persona: str | None
    messages: int
    memories: int
    episodes: int
    context_records: int
    memory_history: int
    tool_calls: int = Field(default=0, description="Tool calls they triggered (with their approvals).")
    schedules: int = Field(default=0, description="Their schedules (their firings' messages are among the messages).")
    redacted: dict[str, int] = Field(description="Quotes of the user replaced elsewhere, by kind of row.")
    channels: list[str] = Field(description="The channels their messages were erased from.")
    wal_kept: bool = Field(description="SQLite: a reader kept the WAL from being truncated (the next checkpoint does).")
    remaining: dict[str, int] = Field(
        description="SQLite: copies of the user's texts still found in the database files after the erasure, "
        "by file (counted in their bytes; empty: none)."
    )
    vacuumed: bool = Field(description="SQLite: the database was rebuilt (VACUUM) to remove copies left in its pages.")
    until_vacuum: str | None = Field(
        description="PostgreSQL: what the server keeps until its own vacuum, and what the operator can run."
    )


@operation("user_export", roles=(ADMIN,))
def export(ctx: OpContext, request: UserRequest) -> UserExport:
    """Everything kept about the user as one document."""
    return UserExport.model_validate(export_user(ctx.parts.store, request.user, request.persona))


@operation("user_forget", roles=(ADMIN,))
def forget(ctx: OpContext, request: UserRequest) -> UserForgotten:
    """Erase everything kept about the user, in one transaction."""
    erased = forget_user(ctx.parts.store, request.user, request.persona)
    return UserForgotten.model_validate({"user": request.user, "persona": request.persona, **erased.as_json()})
