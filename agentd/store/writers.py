"""Taking turns at SQLite's one writer: the threads of a process, and the daemon's processes.

SQLite lets one transaction write at a time. Its busy handler makes a writer
that finds the lock taken sleep and retry (1, 2, 5, 10 … 100 ms), so under many
writers each waits far longer than the write it waits for. :class:`WriteTurns`
makes them queue instead: the threads of a process on a lock, handed over at
once; and, once :meth:`WriteTurns.share` was called (the daemon and its worker
processes, :mod:`agentd.runtime.scaleout.workers`), the processes on an exclusive
``flock`` of a file beside the database (``<database>-writers``), which the
kernel releases when its holder dies, so a killed worker never leaves it taken.
Another process still waiting for that file looks again within a millisecond.
Processes that do not share it (the CLI) meet SQLite's busy timeout, as before.
Every wait is bounded by the busy timeout.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

try:  # POSIX only; elsewhere the processes meet SQLite's busy timeout
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: First and longest pause between two looks at the lock file held by another process.
FIRST_PAUSE = 50e-6
LONGEST_PAUSE = 1e-3


class WriteTurns:
    """Who may write now: one thread of this process and, once shared, one process."""

    def __init__(self, database: Path | None) -> None:
        self._database = database
        self._threads = threading.RLock()
        self._depth = 0  # how deep the thread holding ``_threads`` is in nested writes
        self._file: int | None = None

    @property
    def shared(self) -> bool:
        """Whether other processes take their turns on the same file."""
        return self._file is not None

    def share(self) -> None:
        """Take turns with the other processes that share the database's writers file."""
        if self._file is not None or self._database is None or fcntl is None:
            return
        self._file = os.open(f"{self._database}-writers", os.O_RDWR | os.O_CREAT, 0o600)

    def acquire(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the turn; False when it did not come."""
        deadline = time.monotonic() + timeout
        if not self._threads.acquire(timeout=timeout):
            return False
        if self._depth == 0 and self._file is not None and not self._lock_file(deadline):
            self._threads.release()
            return False
        self._depth += 1
        return True

    def release(self) -> None:
        """End the turn (the file's lock goes with the outermost one)."""
        self._depth -= 1
        if self._depth == 0 and self._file is not None:
            assert fcntl is not None
            fcntl.flock(self._file, fcntl.LOCK_UN)
        self._threads.release()

    def close(self) -> None:
        """Close the writers file."""
        if self._file is not None:
            os.close(self._file)
            self._file = None

    def _lock_file(self, deadline: float) -> bool:
        assert fcntl is not None
        assert self._file is not None
        pause = FIRST_PAUSE
        while True:
            try:
                fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE)
