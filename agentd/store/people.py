"""A person's data: everything kept about one user, exported as one document or erased.

What belongs to user ``U`` (of every persona, or of one with ``persona``):

- their messages (``role = 'user'``, ``author = U``) and every message that answers one of
  them (``reply_to``; replies to replies too), with the context records of those replies;
- memories in the scopes ``user:U`` and ``episodes:user:U``, and every memory learned from one
  of those messages (``source_message_id``: a channel or global memory taken from their words,
  an episode of a shared channel whose line is theirs), with their ``memory_history``.

:func:`export` reads all of it. :func:`forget` deletes it in the caller's write transaction,
with the memories' vectors and full-text entries, and removes the copies other rows hold:

- a context record of another reply that recalled one of the deleted memories keeps the entry
  with its text replaced by :data:`REDACTED`;
- in the channels the user wrote in, another message, another reply's context record, an
  episode's indexed context (the neighbouring lines of a shared channel) or a memory's history
  that quotes one of their messages or deleted memories word for word keeps its place with the
  quote replaced by :data:`REDACTED`; a memory whose *text* quotes one is deleted (its vector
  would still encode the quote). Quotes shorter than :data:`MIN_QUOTE` characters ("ok", "thanks")
  are not searched for: they say nothing of the person and would blank other people's words.

The per-day spend rows (``usage_days``) that name them keep their tokens, as nobody's: a
persona's spend cap does not reset because one of its users was forgotten.

Replies are deleted rather than redacted because they exist only as answers to the person (the
offline model quotes the message it answers); other people's messages are redacted rather than
deleted because they are other people's data. A paraphrase is not a quote and is not found.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from agentd.store import schema
from agentd.store.indexes import TextIndex, VectorIndex
from agentd.store.lexical import context_of
from agentd.store.schedules import AUTHOR_PREFIX
from agentd.store.schema import id_chunks
from agentd.store.spend import SpendRepo

_M = schema.messages
_C = schema.channels
_T = schema.memories
_H = schema.memory_history
_R = schema.context_records
_J = schema.job_cursors
_X = schema.tool_calls
_A = schema.approvals
_S = schema.schedules

#: What replaces a quote of a forgotten text (and a forgotten memory's text in a context record).
REDACTED = "[forgotten]"
#: Texts shorter than this (stripped) are not searched for as quotes.
MIN_QUOTE = 12
#: Quotes per ``LIKE`` prefilter statement.
_QUOTES_PER_QUERY = 20
#: Memories categories kept as episodes (reported apart in an export).
_EPISODE = "episode"


@dataclass
class Erased:
    """How many of each kind :func:`forget` removed or redacted."""

    messages: int = 0
    memories: int = 0
    episodes: int = 0
    context_records: int = 0
    memory_history: int = 0
    #: Tool calls they triggered (and calls of turns answering them), with their approvals.
    tool_calls: int = 0
    schedules: int = 0
    redacted: dict[str, int] = field(default_factory=dict)
    channels: list[str] = field(default_factory=list)
    #: SQLite: a reader kept the WAL (old page images) from being truncated after the erasure.
    wal_kept: bool = False
    #: SQLite: copies of the person's texts still found in the database's files, by file name
    #: (counted in their bytes after the erasure; empty: none).
    remaining: dict[str, int] = field(default_factory=dict)
    #: SQLite: the database was rebuilt (``VACUUM``) because copies were found after the checkpoint.
    vacuumed: bool = False
    #: PostgreSQL: what the server keeps until its own vacuum, and what the operator can run.
    until_vacuum: str | None = None
    #: The texts erased (searched for in the files; never reported).
    texts: list[str] = field(default_factory=list, repr=False)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (counts and channel names only, never a text)."""
        return {
            "messages": self.messages,
            "memories": self.memories,
            "episodes": self.episodes,
            "context_records": self.context_records,
            "memory_history": self.memory_history,
            "tool_calls": self.tool_calls,
            "schedules": self.schedules,
            "redacted": dict(self.redacted),
            "channels": list(self.channels),
            "wal_kept": self.wal_kept,
            "remaining": dict(self.remaining),
            "vacuumed": self.vacuumed,
            "until_vacuum": self.until_vacuum,
        }

    @property
    def total(self) -> int:
        """Rows deleted."""
        return (
            self.messages
            + self.memories
            + self.episodes
            + self.context_records
            + self.memory_history
            + self.tool_calls
            + self.schedules
        )


def _user_scopes(user: str) -> list[str]:
    return [f"user:{user}", f"episodes:user:{user}"]


def _schedules(conn: sa.Connection, user: str, persona: str | None) -> list[int]:
    """The ids of the schedules made for ``user``."""
    query = sa.select(_S.c.id).where(_S.c.user_id == user)
    if persona is not None:
        query = query.where(_S.c.persona == persona)
    return [int(i) for i in conn.execute(query.order_by(_S.c.id)).scalars()]


def _authored(conn: sa.Connection, user: str, persona: str | None) -> list[int]:
    """The user's messages, and the trigger messages of the schedules made for them."""
    authors = [user, *(f"{AUTHOR_PREFIX}{i}" for i in _schedules(conn, user, persona))]
    query = sa.select(_M.c.id).where(_M.c.role == "user", _M.c.author.in_(authors))
    if persona is not None:
        query = query.where(_M.c.persona == persona)
    return [int(i) for i in conn.execute(query.order_by(_M.c.id)).scalars()]


def _answers(conn: sa.Connection, ids: Sequence[int]) -> list[int]:
    """Messages that answer one of ``ids``, and those that answer them, and so on."""
    found: list[int] = []
    frontier = list(ids)
    seen = set(ids)
    while frontier:
        nxt: list[int] = []
        for chunk in id_chunks(frontier):
            for mid in conn.execute(sa.select(_M.c.id).where(_M.c.reply_to.in_(chunk))).scalars():
                if int(mid) not in seen:
                    seen.add(int(mid))
                    nxt.append(int(mid))
        found.extend(nxt)
        frontier = nxt
    return sorted(found)


def _memory_ids(conn: sa.Connection, user: str, persona: str | None, message_ids: Sequence[int]) -> list[int]:
    base = sa.select(_T.c.id)
    if persona is not None:
        base = base.where(_T.c.persona == persona)
    found = {int(i) for i in conn.execute(base.where(_T.c.scope.in_(_user_scopes(user)))).scalars()}
    for chunk in id_chunks(message_ids):
        found.update(int(i) for i in conn.execute(base.where(_T.c.source_message_id.in_(chunk))).scalars())
    return sorted(found)


def _rows(conn: sa.Connection, table: sa.Table, column: sa.Column[Any], ids: Sequence[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for chunk in id_chunks(ids):
        out.extend(
            dict(r._mapping) for r in conn.execute(sa.select(table).where(column.in_(chunk)).order_by(table.c.id))
        )
    return out


def _when(value: Any) -> Any:
    return value.isoformat().replace("+00:00", "Z") if hasattr(value, "isoformat") else value


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: _when(v) for k, v in row.items()}


def export(conn: sa.Connection, user: str, persona: str | None = None) -> dict[str, Any]:
    """Everything kept about ``user`` (of ``persona`` only, when given) as one JSON-ready document."""
    authored = _authored(conn, user, persona)
    answers = _answers(conn, authored)
    message_ids = sorted(set(authored) | set(answers))
    memory_ids = _memory_ids(conn, user, persona, message_ids)
    history: dict[int, list[dict[str, Any]]] = {}
    for row in _rows(conn, _H, _H.c.memory_id, memory_ids):
        history.setdefault(int(row["memory_id"]), []).append(_plain(row))
    memories: list[dict[str, Any]] = []
    episodes: list[dict[str, Any]] = []
    for row in _rows(conn, _T, _T.c.id, memory_ids):
        item = _plain({k: v for k, v in row.items() if k != "content_hash"})
        item["history"] = history.get(int(row["id"]), [])
        (episodes if row["category"] == _EPISODE else memories).append(item)
    messages = [_plain(r) for r in _rows(conn, _M, _M.c.id, authored)]
    replies = [_plain(r) for r in _rows(conn, _M, _M.c.id, answers)]
    records = [_plain(r) for r in _rows(conn, _R, _R.c.reply_id, answers)]
    return {
        "user": user,
        "persona": persona,
        "memories": memories,
        "episodes": episodes,
        "messages": messages,
        "replies": replies,
        "context_records": records,
        **_tool_rows(conn, user, persona, authored),
        "schedules": [_plain(r) for r in _rows(conn, _S, _S.c.id, _schedules(conn, user, persona))],
    }


def _theirs(table: sa.Table, user: str, persona: str | None, message_ids: Sequence[int]) -> Any:
    """The rows of ``tool_calls`` or ``approvals`` that ``user`` triggered or that belong to their
    turns (of ``persona``, when given)."""
    where = sa.or_(table.c.asked_by == user, table.c.message_id.in_(list(message_ids)))
    return where if persona is None else sa.and_(where, table.c.persona == persona)


def _tool_rows(conn: sa.Connection, user: str, persona: str | None, message_ids: Sequence[int]) -> dict[str, Any]:
    """The tool calls ``user`` triggered and the approvals they asked for, for an export."""
    return {
        name: [
            _plain(dict(r._mapping)) for r in conn.execute(sa.select(t).where(_theirs(t, user, persona, message_ids)))
        ]
        for name, t in (("tool_calls", _X), ("approvals", _A))
    }


def _quotes(texts: Iterable[str]) -> list[str]:
    """The distinct texts worth searching for as quotes, longest first (a longer quote is redacted
    before a shorter one it contains)."""
    kept = {t.strip() for t in texts if t and len(t.strip()) >= MIN_QUOTE}
    return sorted(kept, key=lambda t: (-len(t), t))


def _json_form(text: str) -> str:
    """How ``text`` appears inside a stored JSON document (the JSON column's serializer escapes it)."""
    return json.dumps(text)[1:-1]


def redact(text: str, quotes: Sequence[str]) -> str:
    """``text`` with every occurrence of each of ``quotes`` replaced by :data:`REDACTED`."""
    for quote in quotes:
        if quote in text:
            text = text.replace(quote, REDACTED)
    return text


def _redact_json(value: Any, quotes: Sequence[str], memory_ids: set[int]) -> Any:
    """A JSON value with quotes redacted in every string, and the text of each entry that names a
    forgotten memory (``{"id": ..., "text": ...}`` of a context record's memories) replaced."""
    if isinstance(value, str):
        return redact(value, quotes)
    if isinstance(value, list):
        return [_redact_json(v, quotes, memory_ids) for v in value]
    if isinstance(value, dict):
        out = {k: _redact_json(v, quotes, memory_ids) for k, v in value.items()}
        if isinstance(out.get("id"), int) and out["id"] in memory_ids and isinstance(out.get("text"), str):
            out["text"] = REDACTED
        return out
    return value


def _quoting(conn: sa.Connection, query: sa.Select[Any], columns: Sequence[Any], quotes: Sequence[str]) -> list[Any]:
    """Rows of ``query`` where one of ``columns`` (cast to text) contains a quote, raw or JSON-escaped."""
    found: dict[Any, Any] = {}
    forms = sorted({form for q in quotes for form in (q, _json_form(q))})
    for start in range(0, len(forms), _QUOTES_PER_QUERY):
        part = forms[start : start + _QUOTES_PER_QUERY]
        matches = [sa.cast(c, sa.Text).contains(f, autoescape=True) for c in columns for f in part]
        for row in conn.execute(query.where(sa.or_(*matches))):
            found[row[0]] = row
    return [found[k] for k in sorted(found)]


def forget(
    conn: sa.Connection, vectors: VectorIndex, words: TextIndex, user: str, persona: str | None = None
) -> Erased:
    """Erase everything kept about ``user`` (see the module docstring), in ``conn``'s transaction."""
    erased = Erased()
    authored = _authored(conn, user, persona)
    answers = _answers(conn, authored)
    gone_messages = sorted(set(authored) | set(answers))
    memory_ids = set(_memory_ids(conn, user, persona, gone_messages))
    channels = sorted(
        {
            str(c)
            for chunk in id_chunks(gone_messages)
            for c in conn.execute(sa.select(_M.c.channel).where(_M.c.id.in_(chunk))).scalars()
        }
    )
    erased.channels = channels
    texts = [
        str(t)
        for chunk in id_chunks(authored)
        for t in conn.execute(sa.select(_M.c.content).where(_M.c.id.in_(chunk))).scalars()
    ]
    texts += [str(r["text"]) for r in _rows(conn, _T, _T.c.id, sorted(memory_ids))]
    quotes = _quotes(texts)
    erased.texts = texts
    reach = sa.or_(
        _T.c.scope.in_(["global", *(f"channel:{c}" for c in channels), *(f"episodes:channel:{c}" for c in channels)]),
        _T.c.scope.in_(_user_scopes(user)),
    )
    if quotes:
        # A memory of these channels (or global) whose text quotes the person goes too.
        query: Any = sa.select(_T.c.id, _T.c.text).where(reach)
        if persona is not None:
            query = query.where(_T.c.persona == persona)
        memory_ids.update(int(r[0]) for r in _quoting(conn, query, [_T.c.text], quotes))

    # Context records of the deleted replies, then of anything pointing at a deleted message.
    for chunk in id_chunks(gone_messages):
        erased.context_records += conn.execute(
            sa.delete(_R).where(sa.or_(_R.c.reply_id.in_(chunk), _R.c.user_message_id.in_(chunk)))
        ).rowcount
    # Memories with their vectors and words, and their history.
    recalled: list[str] = []
    for row in _rows(conn, _T, _T.c.id, sorted(memory_ids)):
        recalled.append(str(row["text"]))
        conn.execute(sa.delete(_T).where(_T.c.id == row["id"]))
        vectors.delete(conn, int(row["id"]))
        words.delete(conn, int(row["id"]))
        if row["category"] == _EPISODE:
            erased.episodes += 1
        else:
            erased.memories += 1
    for chunk in id_chunks(sorted(memory_ids)):
        erased.memory_history += conn.execute(sa.delete(_H).where(_H.c.memory_id.in_(chunk))).rowcount
    for chunk in id_chunks(gone_messages):
        erased.memory_history += conn.execute(sa.delete(_H).where(_H.c.source_message_id.in_(chunk))).rowcount
    for table in (_X, _A):  # their tool calls (arguments, results) and paused conversations
        gone = conn.execute(sa.delete(table).where(_theirs(table, user, persona, gone_messages))).rowcount
        erased.tool_calls += gone if table is _X else 0
    _erase_messages(conn, gone_messages, channels, erased)
    for chunk in id_chunks(_schedules(conn, user, persona)):
        erased.schedules += conn.execute(sa.delete(_S).where(_S.c.id.in_(chunk))).rowcount
    _drop_empty_direct_channels(conn, user)
    if quotes:
        _redact_copies(conn, words, channels, reach, persona, quotes, memory_ids, erased)
    if recalled:
        _redact_recalled(conn, recalled, memory_ids, quotes, erased)
    SpendRepo().forget_user(conn, user, persona)
    return erased


def _erase_messages(conn: sa.Connection, gone_messages: list[int], channels: list[str], erased: Erased) -> None:
    """Delete the messages (what still points at them first), then fix their channels' counts."""
    for chunk in id_chunks(gone_messages):
        conn.execute(sa.update(_M).where(_M.c.reply_to.in_(chunk), _M.c.id.not_in(gone_messages)).values(reply_to=None))
        conn.execute(sa.update(_T).where(_T.c.source_message_id.in_(chunk)).values(source_message_id=None))
    counted: dict[str, int] = {}
    for chunk in id_chunks(gone_messages):
        rows = conn.execute(sa.select(_M.c.channel, _M.c.role).where(_M.c.id.in_(chunk))).all()
        for channel, role in rows:
            if role in ("user", "assistant"):
                counted[str(channel)] = counted.get(str(channel), 0) + 1
        erased.messages += conn.execute(sa.delete(_M).where(_M.c.id.in_(chunk))).rowcount
    for channel, n in counted.items():
        conn.execute(sa.update(_C).where(_C.c.name == channel).values(message_count=_C.c.message_count - n))
    # Bumped so every process's kept history of these channels is read afresh (agentd.prompt.history_cache).
    if channels:
        conn.execute(sa.update(_C).where(_C.c.name.in_(channels)).values(erasures=_C.c.erasures + 1))


def _drop_empty_direct_channels(conn: sa.Connection, user: str) -> None:
    """A direct channel of ``user``'s left empty goes, with its background jobs' cursors."""
    owned = conn.execute(sa.select(_C.c.name).where(_C.c.owner == user, _C.c.visibility == "direct")).scalars().all()
    for name in owned:
        if conn.execute(sa.select(_M.c.id).where(_M.c.channel == name).limit(1)).first() is None:
            conn.execute(sa.delete(_J).where(_J.c.channel == name))
            conn.execute(sa.delete(_C).where(_C.c.name == name))


def _count(erased: Erased, kind: str, n: int = 1) -> None:
    erased.redacted[kind] = erased.redacted.get(kind, 0) + n


def _redact_copies(
    conn: sa.Connection,
    words: TextIndex,
    channels: Sequence[str],
    reach: Any,
    persona: str | None,
    quotes: Sequence[str],
    memory_ids: set[int],
    erased: Erased,
) -> None:
    """Quotes of the person in what the other people of their channels keep."""
    query: Any
    if channels:
        query = sa.select(_M.c.id, _M.c.content).where(_M.c.channel.in_(channels))
        for mid, content in _quoting(conn, query, [_M.c.content], quotes):
            conn.execute(sa.update(_M).where(_M.c.id == mid).values(content=redact(str(content), quotes)))
            _count(erased, "messages")
        query = sa.select(_R.c.id, _R.c.data).where(_R.c.channel.in_(channels))
        for rid, data in _quoting(conn, query, [_R.c.data], quotes):
            conn.execute(sa.update(_R).where(_R.c.id == rid).values(data=_redact_json(data, quotes, memory_ids)))
            _count(erased, "context_records")
    query = sa.select(_T.c.id, _T.c.persona, _T.c.scope, _T.c.text, _T.c.metadata).where(reach)
    if persona is not None:
        query = query.where(_T.c.persona == persona)
    for mid, who, scope, text, metadata in _quoting(conn, query, [_T.c.metadata], quotes):
        if int(mid) in memory_ids:
            continue
        cleaned = _redact_json(metadata, quotes, memory_ids)
        conn.execute(sa.update(_T).where(_T.c.id == mid).values(metadata=cleaned))
        words.delete(conn, int(mid))
        words.insert(conn, [(int(mid), str(who), str(scope), str(text), context_of(cleaned))])
        _count(erased, "memories")
    query = sa.select(_H.c.id, _H.c.old_text, _H.c.new_text)
    for hid, old, new in _quoting(conn, query, [_H.c.old_text, _H.c.new_text], quotes):
        conn.execute(
            sa.update(_H)
            .where(_H.c.id == hid)
            .values(
                old_text=None if old is None else redact(str(old), quotes),
                new_text=None if new is None else redact(str(new), quotes),
            )
        )
        _count(erased, "memory_history")


def _redact_recalled(
    conn: sa.Connection, recalled: Sequence[str], memory_ids: set[int], quotes: Sequence[str], erased: Erased
) -> None:
    """Other replies' context records (any channel: a global memory is recalled everywhere) that
    recalled a forgotten memory keep the entry, with :data:`REDACTED` for its text. Found by the
    entry as the JSON column stores it (``"text": "..."``), whatever the text's length."""
    forms = sorted({f'"text": {json.dumps(t)}' for t in recalled})
    found: dict[int, Any] = {}
    for start in range(0, len(forms), _QUOTES_PER_QUERY):
        part = forms[start : start + _QUOTES_PER_QUERY]
        query = sa.select(_R.c.id, _R.c.data).where(
            sa.or_(*(sa.cast(_R.c.data, sa.Text).contains(f, autoescape=True) for f in part))
        )
        found.update((int(r[0]), r[1]) for r in conn.execute(query))
    for rid in sorted(found):
        cleaned = _redact_json(found[rid], quotes, memory_ids)
        if cleaned != found[rid]:
            conn.execute(sa.update(_R).where(_R.c.id == rid).values(data=cleaned))
            _count(erased, "context_records")
