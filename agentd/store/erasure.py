"""What an erasure leaves in SQLite's files, found by their bytes, and how to leave nothing.

Deleting rows is not enough for ``agentd user forget``: a page keeps a deleted row's
bytes as free space, a page split leaves copies of moved cells behind, and the WAL keeps
pages as they were. Every connection runs with ``secure_delete`` (:mod:`agentd.store.engine`),
which zeroes what is freed from then on; what an older file (or an older SQLite) left
behind is found here by searching the files for the person's texts (:func:`copies`) and
removed by :func:`vacuum`, which rewrites every page from the live rows. The erasure then
reports what it found, not what it hoped: ``remaining`` is counted in the files.
"""

from __future__ import annotations

import json
import mmap
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import sqlalchemy as sa

#: The longest part of a text searched for (a long text's head: overflow pages cut the rest).
NEEDLE_CHARS = 200
#: Suffixes of the files of one SQLite database that may hold its pages.
SUFFIXES = ("", "-wal")
#: What PostgreSQL keeps after an erasure, and what the operator can run (the erasure's report).
POSTGRES_REMAINS = (
    "PostgreSQL keeps the deleted rows' bytes in their tables' pages until (auto)vacuum reclaims "
    "them, and in its WAL segments until they are recycled; to remove them now run "
    "VACUUM (FULL) messages, memories, memory_words, memory_vectors, context_records, memory_history; "
    "then CHECKPOINT (docs/guides/privacy.md)"
)


def needles(texts: Iterable[str], shortest: int) -> list[bytes]:
    """The byte strings to search for: each text of at least ``shortest`` characters (its head when
    long), as stored in a text column (UTF-8) and in a JSON column (escaped), once each."""
    found: set[bytes] = set()
    for text in texts:
        head = text.strip()[:NEEDLE_CHARS]
        if len(head) < shortest:
            continue
        found.add(head.encode())
        found.add(json.dumps(head)[1:-1].encode())
    return sorted(found)


def copies(database: Path, needles: Sequence[bytes]) -> dict[str, int]:
    """How many times any of ``needles`` occurs in each of ``database``'s files (only files with one)."""
    if not needles:
        return {}
    pattern = re.compile(b"|".join(re.escape(n) for n in sorted(needles, key=len, reverse=True)))
    found: dict[str, int] = {}
    for suffix in SUFFIXES:
        path = Path(f"{database}{suffix}")
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        if not size:
            continue
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            n = sum(1 for _ in pattern.finditer(data))
        if n:
            found[path.name] = n
    return found


def vacuum(engine: sa.Engine) -> None:
    """``VACUUM``: rebuild the database from its live rows, so no page keeps a deleted row's bytes
    (it takes the write lock, waiting the busy timeout; readers go on meanwhile)."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("VACUUM")
        cursor.close()
    finally:
        raw.close()
