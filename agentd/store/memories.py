"""Memory rows, their vectors and their words, kept in one transaction."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from agentd._exceptions import StoreError
from agentd.access.scopes import Scope
from agentd.store import schema
from agentd.store.indexes import TextIndex, VectorIndex, VectorRow, WordsRow
from agentd.store.lexical import context_of
from agentd.store.schema import UTCDateTime, id_chunks, inserted_id, utcnow

if TYPE_CHECKING:
    import numpy as np

_T = schema.memories
_MESSAGES = schema.messages
_FETCH = sa.select(_T).where(_T.c.id.in_(sa.bindparam("ids", expanding=True)))

#: How every episodes scope starts (``episodes:channel:NAME``, ``episodes:user:ID``).
EPISODES_PREFIX = "episodes:"
_WS = re.compile(r"\s+")


def content_hash(text: str) -> str:
    """The dedupe key: sha256 of the NFC, case-folded, whitespace-collapsed text."""
    norm = _WS.sub(" ", unicodedata.normalize("NFC", text)).strip().casefold()
    return hashlib.sha256(norm.encode()).hexdigest()


@dataclass(frozen=True)
class Memory:
    """One stored memory."""

    id: int
    persona: str
    scope: Scope
    category: str
    text: str
    metadata: dict[str, Any]
    created_at: datetime
    content_hash: str
    source_message_id: int | None = None

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "id": self.id,
            "persona": self.persona,
            "scope": str(self.scope),
            "category": self.category,
            "text": self.text,
            "metadata": self.metadata,
            "created_at": self.created_at.isoformat().replace("+00:00", "Z"),
        }


@dataclass(frozen=True)
class NewMemory:
    """A memory to insert, with its vector when an embedder exists."""

    persona: str
    scope: Scope
    category: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    source_message_id: int | None = None


def _memory(row: sa.Row[Any]) -> Memory:
    m = row._mapping
    return Memory(
        id=m["id"],
        persona=m["persona"],
        scope=Scope.parse(m["scope"]),
        category=m["category"],
        text=m["text"],
        metadata=m["metadata"] or {},
        created_at=m["created_at"],
        content_hash=m["content_hash"],
        source_message_id=m["source_message_id"],
    )


class MemoryRepo:
    """SQL for memories: rows in ``memories``, vectors and words in the store's two indexes."""

    def __init__(self, vectors: VectorIndex, words: TextIndex) -> None:
        self._vectors = vectors
        self._words = words

    def add(self, conn: sa.Connection, items: Sequence[NewMemory], vecs: np.ndarray | None) -> list[tuple[int, bool]]:
        """Insert ``items``; return ``(id, created)`` each (``created`` False for a duplicate).

        On PostgreSQL the rows go in one statement and the vectors by ``COPY``, whatever
        their number; after the vector index's ``begin_bulk`` (a benchmark's fill) the HNSW
        graph is built once at the end instead of grown row by row.
        """
        now = utcnow()
        values = [
            {
                "persona": item.persona,
                "scope": str(item.scope),
                "category": item.category,
                "text": item.text,
                "content_hash": content_hash(item.text),
                "metadata": item.metadata or None,
                "created_at": item.created_at or now,
                "source_message_id": item.source_message_id,
            }
            for item in items
        ]
        placed = _insert_many(conn, values) if conn.dialect.name == "postgresql" else _insert_each(conn, values)
        vec_rows: list[VectorRow] = []
        word_rows: list[WordsRow] = []
        for i, (item, (mid, created)) in enumerate(zip(items, placed, strict=True)):
            if not created:
                continue
            scope = str(item.scope)
            word_rows.append((mid, item.persona, scope, item.text, context_of(item.metadata)))
            if vecs is not None:
                vec_rows.append((mid, item.persona, scope, vecs[i]))
        self._vectors.insert(conn, vec_rows)
        self._words.insert(conn, word_rows)
        return placed

    def get(self, conn: sa.Connection, memory_id: int) -> Memory | None:
        """One memory by id."""
        row = conn.execute(sa.select(_T).where(_T.c.id == memory_id)).first()
        return None if row is None else _memory(row)

    def fetch(self, conn: sa.Connection, ids: Sequence[int]) -> dict[int, Memory]:
        """Memories by id (missing ids are absent from the result)."""
        found: dict[int, Memory] = {}
        for chunk in id_chunks(ids):
            for row in conn.execute(_FETCH, {"ids": chunk}):
                mem = _memory(row)
                found[mem.id] = mem
        return found

    def learned_in(self, conn: sa.Connection, ids: Sequence[int]) -> dict[int, str | None]:
        """The channel each memory of ``ids`` was learned in (its source message's; ``None``: unknown)."""
        found: dict[int, str | None] = {int(i): None for i in ids}
        for chunk in id_chunks(ids):
            query = (
                sa.select(_T.c.id, _MESSAGES.c.channel)
                .join(_MESSAGES, _MESSAGES.c.id == _T.c.source_message_id)
                .where(_T.c.id.in_(chunk))
            )
            found.update((mid, channel) for mid, channel in conn.execute(query))
        return found

    def in_scope(self, conn: sa.Connection, ids: Sequence[int], scope: Scope) -> set[int]:
        """Which of ``ids`` are memories of ``scope`` (without loading their rows)."""
        found: set[int] = set()
        for chunk in id_chunks(ids):
            query = sa.select(_T.c.id).where(_T.c.id.in_(chunk), _T.c.scope == str(scope))
            found.update(int(mid) for (mid,) in conn.execute(query))
        return found

    def created_at(self, conn: sa.Connection, ids: Sequence[int]) -> dict[int, datetime]:
        """When each of ``ids`` was created (missing ids are absent): what ranking needs, without the rows.

        On the hot path of every search, so it reads through the driver and parses
        the stored naive-UTC text itself (the ORM type's result processing costs
        more than the query here).
        """
        found: dict[int, datetime] = {}
        if conn.dialect.name == "postgresql":  # the driver returns naive UTC datetimes
            rows = conn.exec_driver_sql(
                f"SELECT id, created_at FROM {_T.name} WHERE id = ANY(%s)", ([int(i) for i in ids],)
            )
            found.update((mid, when.replace(tzinfo=UTC)) for mid, when in rows)
            return found
        for chunk in id_chunks(ids):
            marks = ",".join("?" * len(chunk))
            rows = conn.exec_driver_sql(f"SELECT id, created_at FROM {_T.name} WHERE id IN ({marks})", tuple(chunk))
            found.update((mid, datetime.fromisoformat(when).replace(tzinfo=UTC)) for mid, when in rows)
        return found

    def page(
        self,
        conn: sa.Connection,
        persona: str,
        scope: Scope | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Memory]:
        """A persona's memories, newest first, in one scope (any scope but the episodes' when none)."""
        query = sa.select(_T).where(_T.c.persona == persona)
        if scope is not None:
            query = query.where(_T.c.scope == str(scope))
        else:
            query = query.where(_T.c.scope.not_like(EPISODES_PREFIX + "%"))
        query = query.order_by(_T.c.id.desc()).limit(limit).offset(offset)
        return [_memory(r) for r in conn.execute(query)]

    def count(self, conn: sa.Connection, persona: str | None = None, episodes: bool = True) -> int:
        """How many memories (of one persona, or in all; episodes too unless ``episodes`` is False)."""
        query = sa.select(sa.func.count()).select_from(_T)
        if persona is not None:
            query = query.where(_T.c.persona == persona)
        if not episodes:
            query = query.where(_T.c.scope.not_like(EPISODES_PREFIX + "%"))
        return int(conn.execute(query).scalar_one())

    def delete(self, conn: sa.Connection, memory_id: int) -> bool:
        """Remove the row, its vector and its words; False if there was none."""
        gone = conn.execute(sa.delete(_T).where(_T.c.id == memory_id)).rowcount
        if gone:
            self._vectors.delete(conn, memory_id)
            self._words.delete(conn, memory_id)
        return bool(gone)

    def update_text(self, conn: sa.Connection, memory_id: int, text: str, vector: np.ndarray | None) -> bool:
        """Replace a memory's text (its hash, vector and words with it); False if there was none.

        The text of another memory of the same persona and scope is not duplicated:
        the caller deletes this one instead (see the unique key).
        """
        row = conn.execute(sa.select(_T).where(_T.c.id == memory_id)).first()
        if row is None:
            return False
        memory = _memory(row)
        conn.execute(sa.update(_T).where(_T.c.id == memory_id).values(text=text, content_hash=content_hash(text)))
        scope = str(memory.scope)
        self._vectors.delete(conn, memory_id)
        self._words.delete(conn, memory_id)
        if vector is not None:
            self._vectors.insert(conn, [(memory_id, memory.persona, scope, vector)])
        self._words.insert(conn, [(memory_id, memory.persona, scope, text, context_of(memory.metadata))])
        return True

    def find(self, conn: sa.Connection, persona: str, scope: Scope, text: str) -> int | None:
        """The id of the memory with this text (by its hash) in persona and scope, if any."""
        return conn.execute(
            sa.select(_T.c.id).where(
                _T.c.persona == persona, _T.c.scope == str(scope), _T.c.content_hash == content_hash(text)
            )
        ).scalar_one_or_none()

    def expired(self, conn: sa.Connection, persona: str, scope: Scope, before: datetime | None, keep: int) -> list[int]:
        """Ids in persona and scope created before ``before`` (if given), and beyond the newest ``keep``
        (if positive): what a retention removes."""
        found: set[int] = set()
        base = sa.select(_T.c.id).where(_T.c.persona == persona, _T.c.scope == str(scope))
        if before is not None:
            found.update(int(i) for i in conn.execute(base.where(_T.c.created_at < before)).scalars())
        if keep > 0:
            found.update(int(i) for i in conn.execute(base.order_by(_T.c.id.desc()).offset(keep)).scalars())
        return sorted(found)

    def iter_all(self, conn: sa.Connection, batch: int = 256) -> Iterator[list[Memory]]:
        """Every memory in id order, in batches (for re-embedding)."""
        last = 0
        while True:
            rows = conn.execute(sa.select(_T).where(_T.c.id > last).order_by(_T.c.id).limit(batch)).all()
            if not rows:
                return
            mems = [_memory(r) for r in rows]
            last = mems[-1].id
            yield mems


def _key(values: dict[str, Any]) -> tuple[str, str, str]:
    return (values["persona"], values["scope"], values["content_hash"])


_B = sa.bindparam
#: A memory's id by its dedupe key, and the insert of one row (built once: each turn's episode).
_FIND_KEY = sa.select(_T.c.id).where(
    _T.c.persona == _B("key_persona"), _T.c.scope == _B("key_scope"), _T.c.content_hash == _B("key_hash")
)
_INSERT = sa.insert(_T)


def _insert_each(conn: sa.Connection, rows: Sequence[dict[str, Any]]) -> list[tuple[int, bool]]:
    """SQLite: one row at a time (its inserts are cheap in-process calls); ``(id, created)`` each."""
    out: list[tuple[int, bool]] = []
    for values in rows:
        persona, scope, digest = _key(values)
        key = {"key_persona": persona, "key_scope": scope, "key_hash": digest}
        existing = conn.execute(_FIND_KEY, key).scalar_one_or_none()
        if existing is not None:
            out.append((existing, False))
            continue
        out.append((inserted_id(conn.execute(_INSERT, values)), True))
    return out


_COLUMNS = ("persona", "scope", "category", "text", "content_hash", "metadata", "created_at", "source_message_id")
_TYPES = ("text", "text", "text", "text", "text", "text", "timestamp", "bigint")


def _insert_many(conn: sa.Connection, rows: Sequence[dict[str, Any]]) -> list[tuple[int, bool]]:
    """PostgreSQL: every new row in one statement, then the ids of those already there in one query.

    Writers do not queue on PostgreSQL: the same text added concurrently waits
    for the other transaction (``ON CONFLICT``), then is found as a duplicate.
    Ids follow the order of ``rows``; a text repeated within ``rows`` is
    created once and its repeats are duplicates of it.
    """
    first: dict[tuple[str, str, str], int] = {}
    for i, values in enumerate(rows):
        first.setdefault(_key(values), i)
    fresh = [rows[i] for i in sorted(first.values())]
    if not fresh:
        return []
    stamp = UTCDateTime()
    columns: list[list[Any]] = [
        [v["persona"] for v in fresh],
        [v["scope"] for v in fresh],
        [v["category"] for v in fresh],
        [v["text"] for v in fresh],
        [v["content_hash"] for v in fresh],
        [json.dumps(v["metadata"]) for v in fresh],  # None: JSON null, as the column type writes it
        [stamp.process_bind_param(v["created_at"], conn.dialect) for v in fresh],
        [v["source_message_id"] for v in fresh],
    ]
    arrays = ", ".join(f"%s::{t}[]" for t in _TYPES)
    names = ", ".join(_COLUMNS)
    picked = ", ".join("metadata::json" if c == "metadata" else c for c in _COLUMNS)
    inserted = conn.exec_driver_sql(
        f"INSERT INTO {_T.name} ({names}) SELECT {picked} FROM unnest({arrays}) WITH ORDINALITY AS r({names}, n) "
        "ORDER BY n ON CONFLICT DO NOTHING RETURNING id, persona, scope, content_hash",
        tuple(columns),
    ).all()
    created = {(str(p), str(s), str(h)): int(mid) for mid, p, s, h in inserted}
    found = dict(created)
    rest = [k for k in first if k not in created]
    if rest:
        held = conn.exec_driver_sql(
            f"SELECT m.id, m.persona, m.scope, m.content_hash FROM {_T.name} m "
            "JOIN unnest(%s::text[], %s::text[], %s::text[]) AS k(persona, scope, content_hash) "
            "ON m.persona = k.persona AND m.scope = k.scope AND m.content_hash = k.content_hash",
            ([k[0] for k in rest], [k[1] for k in rest], [k[2] for k in rest]),
        )
        found.update(((str(p), str(s), str(h)), int(mid)) for mid, p, s, h in held)
    out: list[tuple[int, bool]] = []
    for i, values in enumerate(rows):
        key = _key(values)
        if key not in found:  # added and removed again by another transaction meanwhile
            raise StoreError(f"memory {key} neither inserted nor found; retry")
        out.append((found[key], key in created and first[key] == i))
    return out
