"""The HTTP API of ``agentd serve``: FastAPI on uvicorn, server-sent events for replies.

Importing the package loads nothing heavy (``agentd serve`` binds its socket
through :mod:`agentd.api.listen` first); ``DaemonServer`` and ``create_api``
load FastAPI and uvicorn when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentd.api.app import create_api
    from agentd.api.server import DaemonServer


def __getattr__(name: str) -> Any:
    if name == "DaemonServer":
        from agentd.api.server import DaemonServer

        return DaemonServer
    if name == "create_api":
        from agentd.api.app import create_api

        return create_api
    raise AttributeError(f"module 'agentd.api' has no attribute {name!r}")


__all__ = ["DaemonServer", "create_api"]
