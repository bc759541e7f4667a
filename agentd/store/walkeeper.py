"""Keeping SQLite's write-ahead log small while the daemon runs.

The WAL grows with every write until a checkpoint copies it into the database file
and the next writer starts it again. SQLite's own checkpoint comes after 1000 pages by
default (64 MiB at agentd's 64 KiB page; agentd sets 256 pages, 16 MiB) and is passive:
while readers keep coming (a daemon answering a backlog), it never reaches the end of the log, the log is never started
again, and it grows with the messages answered (545 MB after about 1,300 of them, for
a database of 8.8 MB). So every connection sets ``journal_size_limit`` (a log that is
started again is cut back to :data:`JOURNAL_SIZE_LIMIT` bytes; :mod:`agentd.store.engine`),
and :class:`WalKeeper` checkpoints from a background thread every ``[database]
checkpoint_seconds``: ``wal_checkpoint(TRUNCATE)``, waiting at most :data:`WAIT_SECONDS`
for the readers of the moment, which empties the file. A round that does not get
through (readers throughout) tries again at the next tick; the log can never be more than
one tick's writes plus the limit behind.
"""

from __future__ import annotations

import threading

from agentd.observe.log import get_logger
from agentd.store import Store

log = get_logger("agentd.store")

#: What a reset WAL is cut back to (bytes): ``PRAGMA journal_size_limit`` on every connection.
JOURNAL_SIZE_LIMIT = 16 * 1024 * 1024
#: How long one round waits for the readers of the moment (writers wait behind it meanwhile).
WAIT_SECONDS = 0.5


class WalKeeper:
    """A daemon thread that checkpoints and truncates a SQLite store's WAL every ``interval`` seconds."""

    def __init__(self, store: Store, interval: float) -> None:
        self._store = store
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Rounds that truncated the WAL, and rounds that readers kept from it.
        self.truncated = 0
        self.kept = 0

    @property
    def interval(self) -> float:
        """Seconds between rounds (0: none)."""
        return self._interval

    @property
    def running(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Begin (nothing on PostgreSQL, or when ``interval`` is 0)."""
        if self._store.backend != "sqlite" or self._interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="agentd-wal-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread (it finishes the round it is in)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def round(self) -> bool:
        """One checkpoint: True when the WAL was copied into the database and truncated."""
        done = self._store.checkpoint(wait=WAIT_SECONDS)
        if done:
            self.truncated += 1
        else:
            self.kept += 1
        return done

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.round()
            except Exception as exc:  # a store error: log it and try at the next tick
                log.warning("wal_checkpoint_failed", error=repr(exc))
