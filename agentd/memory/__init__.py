"""Long-term memory: the service every caller uses (searching is :mod:`agentd.search`)."""

from agentd.memory.importer import ImportReport
from agentd.memory.service import MemoryService
from agentd.store.memories import Memory, NewMemory

__all__ = ["ImportReport", "Memory", "MemoryService", "NewMemory"]
