"""The skills a persona may call: ``remember``, ``recall`` and ``delegate``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.skills.memory import RecallSkill, RememberSkill
from agentd.skills.registry import Caller, Skill, SkillRegistry

if TYPE_CHECKING:
    from agentd.memory import MemoryService
    from agentd.personas import Persona, Personas
    from agentd.skills.delegate import DelegateRunner


def build_registry(
    persona: Persona,
    memory: MemoryService | None,
    personas: Personas,
    delegate: DelegateRunner | None = None,
) -> SkillRegistry:
    """The skills ``persona`` enables that can work here.

    ``remember`` and ``recall`` need a memory service with an embedder;
    ``delegate`` needs another persona to delegate to.
    """
    skills: list[Skill] = []
    has_memory = memory is not None and memory.embedder is not None
    if "remember" in persona.skills and has_memory:
        assert memory is not None
        skills.append(RememberSkill(memory))
    if "recall" in persona.skills and has_memory:
        assert memory is not None
        skills.append(RecallSkill(memory))
    others = [name for name in personas if name != persona.name]
    if "delegate" in persona.skills and others:
        from agentd.skills.delegate import DelegateSkill

        skills.append(DelegateSkill(others, delegate))
    return SkillRegistry(skills)


__all__ = ["RecallSkill", "RememberSkill", "Skill", "Caller", "SkillRegistry", "build_registry"]
