"""``remember`` and ``recall``: the model's explicit access to long-term memory, as adapters over
the memory operations (:func:`agentd.ops.memory.remember`, :func:`agentd.ops.memory.recall`).

The model acts as its persona (role :data:`~agentd.ops.base.PERSONA`) within its conversation: the
conversation's user and channel fill in what the arguments leave out. A refused argument is
:class:`~agentd.SkillInvalidInput` with the operation's reason; a search that cannot run (no
embedding model) :class:`~agentd.SkillExecutionFailed`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentd._exceptions import (
    EmbedderNotConfigured,
    InvalidInput,
    NotFound,
    SkillExecutionFailed,
    SkillInvalidInput,
)
from agentd.ops import memory as ops
from agentd.ops.base import PERSONA, OpContext, Request, parse, tool_schema
from agentd.skills.registry import SkillCaller, SkillDeps, function_tool

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.memory import MemoryService
    from agentd.personas import Persona, Personas
    from agentd.prompt.tokens import TokenCounter
    from agentd.store import Store


@dataclass(frozen=True)
class ConversationParts:
    """The parts the memory skills' operations use: the memory service (the conversation gives the
    persona; a skill has no configuration, store or tokenizer of its own to give)."""

    memory: MemoryService

    @property
    def personas(self) -> Personas:
        """Not given to skills: the conversation names its persona."""
        raise SkillExecutionFailed("this operation is not offered to a persona's tools")

    @property
    def config(self) -> Config:
        """Not given to skills."""
        raise SkillExecutionFailed("this operation is not offered to a persona's tools")

    @property
    def store(self) -> Store:
        """Not given to skills."""
        raise SkillExecutionFailed("this operation is not offered to a persona's tools")

    def token_counter(self, persona: Persona) -> TokenCounter:
        """Not given to skills."""
        raise SkillExecutionFailed("this operation is not offered to a persona's tools")


def _context(memory: MemoryService, caller: SkillCaller) -> OpContext:
    """The persona acting in its conversation."""
    return OpContext(
        ConversationParts(memory),
        PERSONA,
        caller.persona,
        persona=caller.persona,
        user=caller.user,
        channel=caller.channel,
        shared_channel=caller.shared_channel,
        message_id=caller.message_id,
        via="skill",
    )


@contextmanager
def _as_skill_errors() -> Iterator[None]:
    """The operation's errors as a tool's: bad input for the model to fix, or a failure."""
    try:
        yield
    except EmbedderNotConfigured as exc:
        raise SkillExecutionFailed(str(exc)) from exc
    except (InvalidInput, NotFound) as exc:
        raise SkillInvalidInput(str(exc)) from exc


def _definition(name: str, description: str, arguments: type[Request]) -> dict[str, Any]:
    schema = tool_schema(arguments)
    return function_tool(name, description, schema["properties"], schema["required"])


class RememberSkill:
    """``remember(text, category, scope)``: store a memory."""

    name = "remember"

    def __init__(self, memory: MemoryService) -> None:
        self._memory = memory

    def definition(self) -> dict[str, Any]:
        """The tool definition (:class:`~agentd.ops.memory.RememberArgs`' schema)."""
        return _definition(
            self.name,
            "Store a fact, preference or decision in long-term memory so it can be recalled later.",
            ops.RememberArgs,
        )

    def run(self, arguments: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Store the memory; a duplicate is reported, not stored twice."""
        acting = _context(self._memory, ctx)
        with _as_skill_errors():
            added = ops.remember(acting, parse(ops.RememberArgs, arguments).to_request(acting))
        mem = added.memory
        return {"stored": added.created, "id": mem.id, "scope": mem.scope, "text": mem.text, "category": mem.category}


class RecallSkill:
    """``recall(query, limit=5)``: search long-term memory.

    Results carry text, category, score and created_at; bad arguments are InvalidInput,
    a failed search ExecutionFailed.
    """

    name = "recall"

    def __init__(self, memory: MemoryService) -> None:
        self._memory = memory

    def definition(self) -> dict[str, Any]:
        """The tool definition: ``query`` (required) and ``limit`` (:class:`~agentd.ops.memory.RecallQuery`)."""
        return _definition(
            self.name,
            "Search long-term memory for stored facts, preferences or context relevant to a query.",
            ops.RecallQuery,
        )

    def run(self, arguments: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Search this conversation's reach, return results best first (each ``{text, category,
        score, created_at}``, the skill's published shape)."""
        with _as_skill_errors():
            found = ops.recall(_context(self._memory, ctx), parse(ops.RecallQuery, arguments))
        return found.model_dump(mode="json", exclude_none=True, exclude={"results": {"__all__": {"id"}}})


def remember_skill(deps: SkillDeps) -> RememberSkill | None:
    """``remember``, when memories can be stored (a memory service with an embedder)."""
    memory = deps.searchable_memory()
    return RememberSkill(memory) if memory is not None else None


def recall_skill(deps: SkillDeps) -> RecallSkill | None:
    """``recall``, when memories can be searched (a memory service with an embedder)."""
    memory = deps.searchable_memory()
    return RecallSkill(memory) if memory is not None else None
