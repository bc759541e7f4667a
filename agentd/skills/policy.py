"""Tool policies applied: which of a persona's tools a turn's asker may trigger in its channel.

Applied where a turn's tools are built (:meth:`agentd.runtime.pipeline.turn.TurnPreparer.prepare`),
from the person who started the turn, never from what a tool answered: a tool the asker may not
trigger is not offered to the model, so it cannot be talked into calling it, and a result that
asks for another call gets no more rights than the asker has. Each persona's policies are its
file's ``[tools."NAME"]`` tables (:class:`agentd.personas.ToolPolicy`).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.personas import Persona
from agentd.skills.registry import SkillRegistry


@dataclass(frozen=True)
class Offer:
    """The tools offered to one turn, and those withheld from its asker there."""

    registry: SkillRegistry
    #: The persona's tools this asker may not trigger in this channel, sorted.
    withheld: tuple[str, ...] = ()


def offer(registry: SkillRegistry, persona: Persona, user: str | None, channel: str) -> Offer:
    """The tools of ``registry`` that ``user`` may trigger in ``channel``, by ``persona``'s policies."""
    if not persona.tool_policies:
        return Offer(registry)
    allowed = [n for n in registry.names() if persona.policy(n).allows(user, channel)]
    withheld = tuple(n for n in registry.names() if n not in allowed)
    return Offer(registry.only(allowed) if withheld else registry, withheld)


__all__ = ["Offer", "offer"]
