"""Long-term memory: the service every caller uses, and its search results."""

from agentd.memory.importer import ImportReport
from agentd.memory.ranking import MemoryHit
from agentd.memory.service import MemoryService
from agentd.store.memories import Memory, NewMemory

__all__ = ["ImportReport", "Memory", "MemoryHit", "MemoryService", "NewMemory"]
