"""Project context: the ``AGENTS.md`` of a persona's or channel's project directory."""

from __future__ import annotations

import threading
from pathlib import Path

from agentd.prompt.assembler import Project

FILENAME = "AGENTS.md"


class ProjectFiles:
    """Reads ``AGENTS.md`` files, re-reading one only when its mtime or size changes."""

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[tuple[int, int], Project]] = {}
        self._lock = threading.Lock()

    def load(self, directory: Path | None) -> Project | None:
        """The project in ``directory`` (``None`` when there is no directory or no AGENTS.md)."""
        if directory is None:
            return None
        path = directory / FILENAME
        try:
            stat = path.stat()
        except OSError:
            return None
        key = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._cache.get(path)
            if cached is not None and cached[0] == key:
                return cached[1]
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        project = Project(str(path), text)
        with self._lock:
            self._cache[path] = (key, project)
        return project
