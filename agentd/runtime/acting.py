"""Who a message may be posted as: the check every way in goes through.

A message posted as a user has that user's memories recalled for its turn (all of
them in a direct channel). So the caller that submits it must be allowed to speak
for that user: an admin key for anyone, an adapter key only for the users it owns
(its network's, ``irc:*``, or the ones it was made for). :meth:`Intake.submit
<agentd.runtime.intake.Intake.submit>` runs :func:`check_acting` before anything
is stored, for ``POST /v1/chat``, ``POST /v1/channels/{c}/messages``,
``/v1/chat/completions`` and MCP's ``chat`` alike; in-process callers (the CLI,
schedules, adapters' own runtime) pass no caller and act as the operator.
"""

from __future__ import annotations

from typing import Protocol

from agentd._exceptions import Forbidden


class ActingCaller(Protocol):
    """A caller that may act for some users (the daemon's key principal, MCP's session caller)."""

    @property
    def role(self) -> str:
        """The key's role (``admin``, ``adapter``...)."""
        ...

    @property
    def name(self) -> str:
        """The key's name."""
        ...

    def may_act_as(self, user: str) -> bool:
        """True when this caller may post or chat as ``user``."""
        ...


def check_acting(caller: ActingCaller | None, user: str) -> None:
    """Refuse (403 ``forbidden``) a caller that may not speak for ``user``; ``None`` is the operator."""
    if caller is not None and not caller.may_act_as(user):
        raise Forbidden(
            f"the {caller.role} key {caller.name!r} may not post or chat as user {user!r}: an adapter key acts "
            "only for the users it owns (its network's, e.g. 'irc:*', or those given with "
            "agentd keys create --users)"
        )
