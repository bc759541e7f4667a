"""``delegate(persona, task)``: run another persona as a subagent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentd._exceptions import SkillExecutionFailed, SkillInvalidInput
from agentd.skills.registry import DelegateRunner, SkillCaller, SkillDeps, function_tool


class DelegateSkill:
    """Hands a task to another persona and returns its answer as the tool result."""

    name = "delegate"

    def __init__(self, personas: Sequence[str], runner: DelegateRunner | None) -> None:
        self._personas = sorted(personas)
        self._runner = runner

    def definition(self) -> dict[str, Any]:
        """The tool definition, listing the personas that can take a task."""
        return function_tool(
            self.name,
            "Ask another persona to do a task and return its answer. It sees only the task you give it "
            "and its own memories.",
            {
                "persona": {"type": "string", "enum": self._personas, "description": "Who does the task."},
                "task": {"type": "string", "description": "The task, self-contained."},
            },
            ["persona", "task"],
        )

    def run(self, arguments: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Validate, refuse cycles, and run the subagent."""
        persona = arguments.get("persona")
        task = arguments.get("task")
        if not isinstance(persona, str) or persona not in self._personas:
            raise SkillInvalidInput(f"persona must be one of: {', '.join(self._personas)}")
        if not isinstance(task, str) or not task.strip():
            raise SkillInvalidInput("task must be a non-empty string")
        chain = ctx.chain or (ctx.persona,)
        if persona in chain:
            raise SkillInvalidInput(f"delegating to {persona} would loop: {' -> '.join((*chain, persona))}")
        if self._runner is None:
            raise SkillExecutionFailed("delegation is not available outside the runtime")
        return self._runner.run_subagent(persona, task.strip(), ctx)


def delegate_skill(deps: SkillDeps) -> DelegateSkill | None:
    """``delegate``, when there is another persona to delegate to."""
    others = [name for name in deps.personas if name != deps.persona.name]
    return DelegateSkill(others, deps.delegate) if others else None
