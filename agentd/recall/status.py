"""Why a recall step found what it found."""

from __future__ import annotations

from enum import StrEnum


class RecallStatus(StrEnum):
    """Why a recall step found what it found (``MemoryContext`` and ``HistoryContext`` carry one)."""

    OK = "ok"
    #: Turned off for this request (``disable_memory``) or by config.
    DISABLED = "disabled"
    #: No embedding model is configured.
    UNAVAILABLE = "unavailable"
    TIMEOUT = "timeout"
    ERROR = "error"
