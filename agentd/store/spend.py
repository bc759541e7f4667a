"""Tokens spent per UTC day: the ``usage_days`` rows the spend caps are checked against.

One row per (day, persona, user, model), and one per (day, persona, model) with the persona's
total (``user_id`` :data:`ALL_USERS`), added to in the transaction that stores what was spent (a
reply and its context record, an extraction call noted on one), so the rows and the records
never disagree. Reading today's spend of a persona (its totals: one row per model) or of a user
(one row per persona and model) reads a few rows by index, whatever the number of replies.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from agentd.store import schema

_T = schema.usage_days
_KEY = ("day", "persona", "user_id", "model")
#: The ``user_id`` of a persona's total rows (every user's tokens, and nobody's): a persona's cap
#: reads its few total rows, not one row per user it answered. No user id starts with ':'.
ALL_USERS = ":all"


@dataclass(frozen=True)
class Spent:
    """Tokens one model call (or several of the same key) used."""

    day: str
    persona: str
    #: The user whose message it answered ("" for none).
    user: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    calls: int = 1


class SpendRepo:
    """SQL for ``usage_days``."""

    def add(self, conn: sa.Connection, spent: Iterable[Spent], *, totals: bool = True) -> None:
        """Add ``spent`` to its days' rows, and to its personas' totals unless ``totals`` is false (rows
        of the same key are summed first: each key is written once)."""
        sums: dict[tuple[str, str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        for s in spent:
            for user in (s.user, ALL_USERS) if totals else (s.user,):
                total = sums[(s.day, s.persona, user, s.model)]
                total[0] += s.calls
                total[1] += max(0, s.prompt_tokens)
                total[2] += max(0, s.completion_tokens)
        if not sums:
            return
        from sqlalchemy.dialects import postgresql, sqlite  # here: most commands never write usage

        insert = postgresql.insert(_T) if conn.dialect.name == "postgresql" else sqlite.insert(_T)
        statement = insert.on_conflict_do_update(
            index_elements=list(_KEY),
            set_={
                "calls": _T.c.calls + insert.excluded.calls,
                "prompt_tokens": _T.c.prompt_tokens + insert.excluded.prompt_tokens,
                "completion_tokens": _T.c.completion_tokens + insert.excluded.completion_tokens,
            },
        )
        rows = [
            dict(zip(_KEY, key, strict=True)) | {"calls": c, "prompt_tokens": p, "completion_tokens": o}
            for key, (c, p, o) in sums.items()
        ]
        conn.execute(statement, rows)  # one key once (summed above): no row is updated twice

    def of_day(self, conn: sa.Connection, day: str, persona: str | None = None, user: str | None = None) -> list[Spent]:
        """What was spent on ``day``: ``persona``'s totals per model (``user`` is ``""`` in them) and
        ``user``'s rows (each persona and model); neither given: every row of the day but the totals.
        Each read is one short indexed range (the primary key; ``ix_usage_days_user``)."""
        columns = (_T.c.persona, _T.c.user_id, _T.c.model, _T.c.prompt_tokens, _T.c.completion_tokens, _T.c.calls)
        found: list[Spent] = []
        if persona is not None:
            query = sa.select(*columns).where(_T.c.day == day, _T.c.persona == persona, _T.c.user_id == ALL_USERS)
            found += [Spent(day, r[0], "", r[2], int(r[3]), int(r[4]), int(r[5])) for r in conn.execute(query)]
        if user is not None:
            query = sa.select(*columns).where(_T.c.day == day, _T.c.user_id == user)
            found += [Spent(day, r[0], r[1], r[2], int(r[3]), int(r[4]), int(r[5])) for r in conn.execute(query)]
        if persona is None and user is None:
            query = sa.select(*columns).where(_T.c.day == day, _T.c.user_id != ALL_USERS)
            found += [Spent(day, r[0], r[1], r[2], int(r[3]), int(r[4]), int(r[5])) for r in conn.execute(query)]
        return found

    def forget_user(self, conn: sa.Connection, user: str, persona: str | None = None) -> int:
        """Erase ``user``'s name from the rows (of ``persona`` only, when given); what they spent stays
        counted, as nobody's (a persona's cap does not reset when a person is forgotten). Returns
        the number of rows that named them."""
        query = sa.select(_T).where(_T.c.user_id == user)
        if persona is not None:
            query = query.where(_T.c.persona == persona)
        rows = [r._mapping for r in conn.execute(query)]
        for r in rows:
            conn.execute(sa.delete(_T).where(*(_T.c[k] == r[k] for k in _KEY)))
        self.add(
            conn,
            (
                Spent(r["day"], r["persona"], "", r["model"], r["prompt_tokens"], r["completion_tokens"], r["calls"])
                for r in rows
            ),
            totals=False,  # the persona's totals counted them already
        )
        return len(rows)
