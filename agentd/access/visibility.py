"""Who reads a channel: ``direct`` (one user and the persona) or ``shared`` (others read it).

Config decides first (``[channels.NAME] visibility``, NAME may be a glob), then
what the first post declared (adapters say: an IRC query is direct, a #room is
shared), then the channel's name (``[episodes] direct_prefixes``: ``dm-alice``
is alice's direct channel, as episodic memory also holds), else the channel is
shared. A delegation's child channel (``general~researcher``) has its parent's
visibility.

In a shared channel, and in a direct channel for anyone but its user, a user's
user-scoped memories are eligible only when they were learned in that channel
(:meth:`agentd.access.scopes.Reach.eligible`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentd.access.scopes import Reach, root_channel
from agentd.config import Config
from agentd.store import Store

Visibility = Literal["direct", "shared"]
VISIBILITIES: tuple[str, ...] = ("direct", "shared")


@dataclass(frozen=True)
class ChannelVisibility:
    """A channel's visibility, its user when direct, and where that was decided."""

    channel: str
    visibility: str
    owner: str | None
    #: ``config`` | ``declared`` | ``name`` | ``default``.
    source: str

    def private_to(self, user: str | None) -> bool:
        """True when only ``user`` (and the persona) reads the channel."""
        return self.visibility == "direct" and user is not None and self.owner in (None, user)

    def reach(self, persona: str, channel: str, user: str | None) -> Reach:
        """Where a search for ``user`` in ``channel`` may look."""
        return Reach(persona, channel, user, shared_channel=None if self.private_to(user) else channel)

    def as_json(self) -> dict[str, str | None]:
        """A JSON-ready dict."""
        return {"visibility": self.visibility, "owner": self.owner, "source": self.source}


def resolve(config: Config, store: Store, channel: str) -> ChannelVisibility:
    """The visibility of ``channel`` (blocking: one read)."""
    root = root_channel(channel)
    with store.read() as conn:
        declared, owner = store.messages.visibility(conn, root)
    configured = config.channel_visibility(root)
    if configured is not None:
        return ChannelVisibility(root, configured, owner if configured == "direct" else None, "config")
    if declared is not None:
        return ChannelVisibility(root, declared, owner if declared == "direct" else None, "declared")
    named = config.episodes.named_owner(root)
    if named is not None:
        return ChannelVisibility(root, "direct", named, "name")
    return ChannelVisibility(root, "shared", None, "default")
