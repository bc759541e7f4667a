"""The transcript kept between turns: a turn reads only what was said since the last one.

Every turn's prompt carries the channel's transcript (its recent messages), newest first, as far
back as the window holds, which in a long channel is thousands of messages read
again for every reply. :class:`HistoryCache` keeps each recently active
channel's newest conversation rows (as :meth:`~agentd.store.messages.MessageRepo.history_page`
returns them) and, on the next turn, reads only the rows newer than the newest
kept one.

That is exact on SQLite: it has one writer at a time and ids only grow, so once
a reader has seen a message, every message with a smaller id was committed
before it, and what is newer than the kept rows is exactly what has a larger
id. Messages are not edited (only their status and token counts change; the
counts are kept with the rows), and are deleted only when a person's data is
erased (``agentd user forget``), which bumps the channel's ``erasures``: rows
kept at another count are dropped and the channel is read afresh. On PostgreSQL, several sessions
insert at once and an id may be committed after a larger one, so nothing is
kept there and every turn reads the store.

Memory is bounded: at most ``max_rows`` rows in all, least recently used
channels dropped first (a dropped channel is read from the store again).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from agentd.store import Store
from agentd.store.messages import HistoryRow

#: ``(id, role, content, token count, its tokenizer, author)``, as ``history_page`` returns.
Row = HistoryRow
#: Rows kept in all, across channels, by default (~150 bytes each plus the text).
MAX_ROWS = 100_000


@dataclass
class _Kept:
    #: Every conversation row of the channel from ``rows[-1]`` up to ``newest``, newest first.
    rows: list[Row]
    #: The newest id the rows were read up to (they hold every row up to it).
    newest: int
    #: Whether the rows reach back to the channel's first message.
    complete: bool
    #: The channel's ``erasures`` when they were read.
    erasures: int = 0


class HistoryCache:
    """The newest conversation rows of recently active channels (see the module docstring)."""

    def __init__(self, store: Store, max_rows: int = MAX_ROWS, read_limit: int = 20_000) -> None:
        """``read_limit``: more new rows than this since the kept ones, and the channel is read afresh."""
        self._store = store
        self.enabled = store.capabilities.rows_stay_as_read and max_rows > 0
        self._max_rows = max_rows
        self._read_limit = read_limit
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def rows(self, channel: str, before_id: int | None, erasures: int = 0) -> tuple[list[Row], int, bool]:
        """The channel's conversation rows older than ``before_id`` (all: ``None``) that are kept,
        newest first, after reading the ones newer than those kept; the newest id they hold every
        row up to; and whether they reach back to the channel's first message.
        ``([], 0, False)`` when nothing is kept, or it was kept at another ``erasures`` (the
        channel's count, read before): read the store."""
        if not self.enabled:
            return [], 0, False
        with self._lock:
            kept = self._kept.get(channel)
            if kept is None:
                return [], 0, False
            if kept.erasures != erasures:
                del self._kept[channel]
                self._total -= len(kept.rows)
                return [], 0, False
            self._kept.move_to_end(channel)
        if before_id is not None and before_id <= kept.newest + 1:
            return [r for r in kept.rows if r[0] < before_id], before_id - 1, kept.complete
        limit = before_id if before_id is not None else 2**62
        with self._store.read() as conn:
            newer = self._store.messages.history_between(conn, channel, kept.newest, limit, self._read_limit + 1)
        if len(newer) > self._read_limit:
            return [], 0, False  # too far behind: read as if nothing were kept
        return newer + kept.rows, newest_read(before_id, newer, kept.newest), kept.complete

    def keep(self, channel: str, rows: list[Row], newest: int, complete: bool, erasures: int = 0) -> None:
        """Keep ``rows`` (newest first, every conversation row of the channel from the last up to
        ``newest``; ``complete``: back to its first message; read at the channel's ``erasures``)
        for the next turn."""
        if not self.enabled:
            return
        if len(rows) > self._max_rows:
            rows, complete = rows[: self._max_rows], False
        with self._lock:
            old = self._kept.pop(channel, None)
            if old is not None:
                self._total -= len(old.rows)
                if old.newest > newest and old.erasures == erasures:
                    # Another turn of this channel read further meanwhile (a preview, an older message
                    # answered late): keep the newer reading.
                    rows, newest, complete = old.rows, old.newest, old.complete
            self._kept[channel] = _Kept(rows, newest, complete, erasures)
            self._total += len(rows)
            while self._total > self._max_rows and len(self._kept) > 1:
                _channel, dropped = self._kept.popitem(last=False)
                self._total -= len(dropped.rows)

    @property
    def kept_rows(self) -> int:
        """How many rows are kept in all."""
        with self._lock:
            return self._total


def newest_read(before_id: int | None, rows: list[Row], floor: int = 0) -> int:
    """The id every row up to which a read of the rows older than ``before_id`` holds: a turn's
    ``before_id`` is its own stored message, and on SQLite every smaller id was committed before it;
    a read of the whole channel holds every row up to the newest it found."""
    if before_id is not None:
        return before_id - 1
    return rows[0][0] if rows else floor
