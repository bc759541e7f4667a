"""The HTTP API of ``agentd serve``: FastAPI on uvicorn, server-sent events for replies."""

from agentd.api.app import create_api
from agentd.api.server import DaemonServer

__all__ = ["DaemonServer", "create_api"]
