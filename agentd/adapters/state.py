"""An adapter's small state file: where each feed was read to, and the replies still owed.

Written atomically (a temporary file, fsync, rename), so a crash leaves the old or
the new state, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


class AdapterState:
    """``cursors``: channel -> last event id read; ``routes``: channel -> where its replies go
    (``{"room": ...}`` or ``{"dm": ...}``); ``pending``: user message id -> ``{"channel",
    "sender", "meta"?, "reply"?}`` for messages posted and not yet answered on the network;
    ``network``: what the network adapter keeps itself (e.g. Matrix's sync token)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cursors: dict[str, str] = {}
        self.routes: dict[str, dict[str, str]] = {}
        self.pending: dict[str, dict[str, Any]] = {}
        self.network: dict[str, Any] = {}
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8") or "{}")
            self.cursors = {str(k): str(v) for k, v in data.get("cursors", {}).items()}
            self.routes = dict(data.get("routes", {}))
            self.pending = dict(data.get("pending", {}))
            self.network = dict(data.get("network", {}))

    def save(self) -> None:
        """Write the state atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"cursors": self.cursors, "routes": self.routes, "pending": self.pending, "network": self.network}
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=False, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
