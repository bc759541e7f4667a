"""Skills: tools the model may call, with OpenAI-format definitions."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agentd._exceptions import AgentdError, SkillExecutionFailed, SkillInvalidInput
from agentd.observe import tracing

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.memory import MemoryService
    from agentd.personas import Persona, Personas
    from agentd.store import Store


@dataclass(frozen=True)
class SkillCaller:
    """Who is calling a skill, and from where."""

    persona: str
    channel: str
    user: str | None = None
    message_id: int | None = None
    #: Personas on the delegation path so far (for depth and cycle checks).
    chain: tuple[str, ...] = ()
    #: Set when others read the channel: the user's memories learned elsewhere stay out.
    shared_channel: str | None = None


@dataclass(frozen=True)
class SkillDeps:
    """What a skill may need to work: the persona, the memory service, the personas, a delegate runner."""

    persona: Persona
    memory: MemoryService | None
    personas: Personas
    delegate: DelegateRunner | None = None
    #: The configuration and the store (the ``schedule`` skill's; absent where no store is).
    config: Config | None = None
    store: Store | None = None

    def searchable_memory(self) -> MemoryService | None:
        """The memory service when memories can be stored and searched (it has an embedder)."""
        return self.memory if self.memory is not None and self.memory.embedder is not None else None


class DelegateRunner(Protocol):
    """Runs a persona on a task in a child channel and returns its answer."""

    def run_subagent(self, persona: str, task: str, caller: SkillCaller) -> dict[str, Any]:
        """The subagent's answer (``{"persona", "channel", "answer", ...}``)."""
        ...


class Skill(Protocol):
    """One tool."""

    name: str

    def definition(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        ...

    def run(self, arguments: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Do the work; raise :class:`SkillInvalidInput` or :class:`SkillExecutionFailed`."""
        ...


class ToolSource(Protocol):
    """Tools a persona may call beyond agentd's own skills (the MCP servers it lists)."""

    def skills_for(self, persona: Persona) -> list[Skill]:
        """``persona``'s further tools, as skills."""
        ...


#: Builds one skill for a persona, or ``None`` when it cannot work here.
SkillFactory = Callable[[SkillDeps], "Skill | Sequence[Skill] | None"]


def function_tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An OpenAI function-tool definition."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


class SkillRegistry:
    """The skills one persona may use, by name."""

    def __init__(self, skills: Iterable[Skill] = (), approvals: Iterable[str] = ()) -> None:
        """``approvals``: the names of the tools whose every call waits for an owner's approval."""
        self._skills = {s.name: s for s in skills}
        self._approvals = frozenset(approvals) & set(self._skills)

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def names(self) -> list[str]:
        """Registered skill names, sorted."""
        return sorted(self._skills)

    def needs_approval(self, name: str) -> bool:
        """True when a call to ``name`` waits for an owner's approval."""
        return name in self._approvals

    def only(self, names: Iterable[str]) -> SkillRegistry:
        """A registry of these of its skills (their approvals kept)."""
        keep = set(names)
        return SkillRegistry((s for n, s in self._skills.items() if n in keep), self._approvals)

    def tool_definitions(self) -> list[dict[str, Any]]:
        """Every skill's definition, in name order (stable, so prompts are deterministic)."""
        return [self._skills[n].definition() for n in self.names()]

    def execute(self, name: str, arguments: str | dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Run one tool call (a span, ``execute_tool NAME``); every failure is a :class:`~agentd.SkillError`."""
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        with tracing.span(f"execute_tool {name}", attributes):
            return self._execute(name, arguments, ctx)

    def _execute(self, name: str, arguments: str | dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        skill = self._skills.get(name)
        if skill is None:
            raise SkillInvalidInput(f"unknown tool {name!r}; available: {', '.join(self.names()) or 'none'}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError as exc:
                raise SkillInvalidInput(f"arguments of {name} are not valid JSON: {exc.msg}") from None
        if not isinstance(arguments, dict):
            raise SkillInvalidInput(f"arguments of {name} must be a JSON object")
        try:
            return skill.run(arguments, ctx)
        except (SkillInvalidInput, SkillExecutionFailed):
            raise
        except AgentdError as exc:
            raise SkillExecutionFailed(f"{name} failed: {exc}") from exc
