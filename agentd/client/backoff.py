"""Reconnect delays: :class:`~agentd.timing.backoff.Backoff` (exponential, capped, with jitter), as the
client has always exported it; the one implementation is :mod:`agentd.timing.backoff`."""

from __future__ import annotations

from agentd.timing.backoff import Backoff

__all__ = ["Backoff"]
