"""Reconnect delays: :class:`~agentd.backoff.Backoff` (exponential, capped, with jitter), as the
client has always exported it; the one implementation is :mod:`agentd.backoff`."""

from __future__ import annotations

from agentd.backoff import Backoff

__all__ = ["Backoff"]
