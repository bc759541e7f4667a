"""The skills a persona may call, one module each, listed once in :data:`SKILLS`.

Adding a skill is one module (its :class:`~agentd.skills.registry.Skill` and a
factory that says whether it can work here) and one entry in :data:`SKILLS`;
persona files are checked against the table's names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentd.personas import Persona, Personas
from agentd.skills import delegate, memory, schedule
from agentd.skills.memory import RecallSkill, RememberSkill
from agentd.skills.registry import (
    DelegateRunner,
    Skill,
    SkillCaller,
    SkillDeps,
    SkillFactory,
    SkillRegistry,
    ToolSource,
)

if TYPE_CHECKING:  # loading personas checks skill names; it must not load the store
    from agentd.config import Config
    from agentd.memory import MemoryService
    from agentd.store import Store

#: Every skill a persona may enable, by the name persona files use.
SKILLS: dict[str, SkillFactory] = {
    "remember": memory.remember_skill,
    "recall": memory.recall_skill,
    "delegate": delegate.delegate_skill,
    "schedule": schedule.schedule_skill,
}


#: The tools each skill offers the model, by skill name (a policy may name any of them).
SKILL_TOOLS: dict[str, tuple[str, ...]] = {name: (name,) for name in SKILLS} | {
    "schedule": ("schedule", "list_schedules", "cancel_schedule"),
}


def build_registry(
    persona: Persona,
    memory_service: MemoryService | None,
    personas: Personas,
    runner: DelegateRunner | None = None,
    more: ToolSource | None = None,
    *,
    config: Config | None = None,
    store: Store | None = None,
) -> SkillRegistry:
    """The skills ``persona`` enables that can work here (a factory answers ``None`` when its skill
    cannot), and the tools ``more`` gives it (its MCP servers')."""
    deps = SkillDeps(persona, memory_service, personas, runner, config, store)
    found: list[Skill] = []
    for made in (SKILLS[name](deps) for name in persona.skills if name in SKILLS):
        # A skill is one tool or several (``schedule``: schedule, list_schedules, cancel_schedule).
        found += [] if made is None else list(made) if isinstance(made, Sequence) else [made]
    if more is not None and persona.mcp_servers:
        found += more.skills_for(persona)
    return SkillRegistry(found, (p.name for p in persona.tool_policies if p.needs_approval))


__all__ = [
    "SKILLS",
    "SKILL_TOOLS",
    "SkillCaller",
    "DelegateRunner",
    "RecallSkill",
    "RememberSkill",
    "Skill",
    "SkillRegistry",
    "ToolSource",
    "build_registry",
]
