"""The operations' context of a tool call: the persona acting in its conversation (:mod:`agentd.ops.base`).

A skill is a thin adapter over an operation: it parses the model's arguments into the
operation's request (a bad one is :class:`~agentd.SkillInvalidInput` naming the field, which
the model reads and corrects) and runs the operation as :data:`~agentd.ops.base.PERSONA`,
for the user and in the channel of the turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agentd._exceptions import InvalidInput, NotFound, SkillExecutionFailed, SkillInvalidInput
from agentd.ops.base import PERSONA, OpContext, Request, parse, tool_schema

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.memory import MemoryService
    from agentd.personas import Persona, Personas
    from agentd.prompt.tokens import TokenCounter
    from agentd.skills.registry import SkillCaller, SkillDeps
    from agentd.store import Store

T = TypeVar("T")
RequestT = TypeVar("RequestT", bound=Request)


@dataclass(frozen=True)
class SkillParts:
    """The parts a skill was given, as the operations ask for them (a part a skill was not given is
    an execution failure, never reached by the tools that were offered)."""

    deps: SkillDeps

    @property
    def config(self) -> Config:
        """The configuration."""
        return _given(self.deps.config, "config")

    @property
    def personas(self) -> Personas:
        """The personas."""
        return self.deps.personas

    @property
    def memory(self) -> MemoryService:
        """The memory service."""
        return _given(self.deps.memory, "memory")

    @property
    def store(self) -> Store:
        """The store."""
        return _given(self.deps.store, "store")

    def token_counter(self, persona: Persona) -> TokenCounter:
        """Not given to skills."""
        raise SkillExecutionFailed("this tool has no tokenizer")


def _given(part: T | None, name: str) -> T:
    if part is None:
        raise SkillExecutionFailed(f"this tool was given no {name}")
    return part


def op_context(deps: SkillDeps, caller: SkillCaller) -> OpContext:
    """The persona acting in its conversation: for its user, in its channel."""
    return OpContext(
        SkillParts(deps),
        role=PERSONA,
        name=caller.persona,
        persona=caller.persona,
        user=caller.user,
        channel=caller.channel,
        shared_channel=caller.shared_channel,
        message_id=caller.message_id,
        via="skill",
    )


def tool_definition(name: str, description: str, model: type[Request]) -> dict[str, Any]:
    """The OpenAI ``tools`` entry of a tool whose arguments are ``model`` (its schema: the MCP tool's too)."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": tool_schema(model)},
    }


def arguments(model: type[RequestT], given: Mapping[str, Any]) -> RequestT:
    """The model's arguments as ``model``; a bad one is :class:`~agentd.SkillInvalidInput`."""
    return as_tool_error(lambda: parse(model, given))


def as_tool_error(work: Callable[[], T]) -> T:
    """Run ``work``; what the model can correct (bad input, an id not found) is its
    :class:`~agentd.SkillInvalidInput`, with the field and the reason the API gives."""
    try:
        return work()
    except (InvalidInput, NotFound) as exc:
        raise SkillInvalidInput(str(exc)) from exc


__all__ = ["SkillParts", "arguments", "as_tool_error", "op_context", "tool_definition"]
