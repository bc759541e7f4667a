"""Erasure that holds: after ``agentd user forget`` no byte of the user's text is left in
``agentd.db`` or ``agentd.db-wal``, when the tables have grown past a page since she wrote (page
splits copy her text into other pages) and while the daemon answers a backlog for someone else
(its readers keep old WAL frames), and still after the daemon stops; and the report says what
is true (``wal_kept``, ``remaining``) rather than success."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BUDDY, agentd_cli
from tests.support import Running, wait_for

#: alice's secret (lowercase, one token: FTS5 keeps its tokens folded).
SECRET = "zqvsecret55alice"
#: A line of bob's, long enough that a few dozen of them fill a 64 KiB page several times.
FILLER = "the quarterly report covers freight volumes, staffing and the new depot schedule " * 8


def _post(d: Running, channel: str, user: str, text: str, **extra: Any) -> None:
    r = d.client.post(f"/v1/channels/{channel}/messages", json={"user": user, "text": text, **extra})
    assert r.status_code == 202, r.text


def _replies(d: Running, channel: str) -> int:
    return sum(m["role"] == "assistant" and m["status"] == "complete" for m in d.messages(channel))


def _copies(home: Path) -> dict[str, int]:
    """How many times the secret's bytes are in each database file."""
    found = {p.name: p.read_bytes().count(SECRET.encode()) for p in sorted(home.parent.glob("agentd.db*"))}
    return {name: n for name, n in found.items() if n}


def _alice_and_growth(d: Running, grow: int) -> None:
    """alice's secret as a memory, in her direct chat and in general; then ``grow`` posts of bob's."""
    added = d.client.post(
        "/v1/memories", json={"persona": "buddy", "scope": "user:alice", "text": f"alice's pin is {SECRET}"}
    )
    assert added.status_code == 201, added.text
    d.chat(f"my locker code is {SECRET}", persona="buddy", channel="dm-alice", visibility="direct")
    _post(d, "general", "alice", f"note for everyone: the door code is {SECRET}")
    wait_for(lambda: _replies(d, "general") >= 1, 60, "alice's message in general answered")
    assert _copies(d.home)  # positive control: the secret is in the files before the erasure
    for i in range(grow):
        _post(d, "general" if i % 2 else "dm-bob", "bob", f"{i}: {FILLER}", visibility="shared")
    wait_for(lambda: _replies(d, "general") + _replies(d, "dm-bob") >= grow + 1, 300, "bob's posts answered")


def _forget(d: Running) -> dict[str, Any]:
    forgotten = agentd_cli("user", "forget", "alice", "--yes", "--json", config=d.home)
    assert forgotten.returncode == 0, forgotten.stderr
    return json.loads(forgotten.stdout)  # type: ignore[no-any-return]


def _stop(d: Running) -> None:
    d.server.request_stop()
    d.thread.join(60)
    assert not d.thread.is_alive()


def test_erasure_leaves_no_byte_after_the_tables_grew(daemons: Any) -> None:
    d: Running = daemons('[channels.general]\npersonas = ["buddy"]\n', personas={"buddy": BUDDY})
    _alice_and_growth(d, grow=60)
    erased = _forget(d)
    assert erased["messages"] >= 4
    assert _copies(d.home) == {}, erased
    assert erased["wal_kept"] is False
    assert erased["remaining"] == {}
    _stop(d)
    assert _copies(d.home) == {}


def test_erasure_leaves_no_byte_while_a_backlog_is_answered(daemons: Any) -> None:
    d: Running = daemons('[channels.general]\npersonas = ["buddy"]\n', personas={"buddy": BUDDY})
    _alice_and_growth(d, grow=40)
    before = _replies(d, "general") + _replies(d, "dm-bob")
    backlog = 200
    for i in range(backlog):
        _post(d, f"bob-{i % 8}", "bob", f"backlog {i}: {FILLER}", persona="buddy", visibility="shared")
    erased = _forget(d)
    answered = sum(_replies(d, f"bob-{c}") for c in range(8))
    assert answered < backlog, "the backlog was drained before the erasure: the test did not test load"
    assert _copies(d.home) == {}, erased
    assert erased["remaining"] == {}
    wait_for(lambda: sum(_replies(d, f"bob-{c}") for c in range(8)) >= backlog, 300, "the backlog answered")
    assert _copies(d.home) == {}
    _stop(d)
    assert _copies(d.home) == {}
    assert before > 0


def test_copies_left_by_an_older_file_are_found_and_vacuumed_away(daemons: Any) -> None:
    """A file written before every connection zeroed what it freed: a deleted copy of her words
    sits in a page's free space. The erasure finds it in the bytes, rebuilds the database, and
    reports it (``vacuumed``), with nothing ``remaining``."""
    d: Running = daemons('[channels.general]\npersonas = ["buddy"]\n', personas={"buddy": BUDDY})
    said = f"note for everyone: the door code is {SECRET}"
    _post(d, "general", "alice", said)
    wait_for(lambda: _replies(d, "general") >= 1, 60, "alice's message answered")
    old = d.app.store.engine.raw_connection()
    try:
        old.execute("PRAGMA secure_delete = OFF")  # as SQLite's default, and agentd before secure_delete was set
        old.execute("CREATE TABLE scratch (t TEXT)")
        old.execute("INSERT INTO scratch VALUES (?)", (said,))
        old.execute("DELETE FROM scratch")
        old.execute("PRAGMA secure_delete = ON")
    finally:
        old.close()
    assert _copies(d.home)  # the deleted copy is in the file's free space
    erased = _forget(d)
    assert erased["vacuumed"] is True
    assert erased["remaining"] == {}
    assert erased["until_vacuum"] is None
    assert _copies(d.home) == {}


@pytest.mark.both_backends
def test_the_report_says_what_postgresql_keeps_until_its_vacuum(daemons: Any, backend: str) -> None:
    d: Running = daemons('[channels.general]\npersonas = ["buddy"]\n', personas={"buddy": BUDDY})
    _post(d, "general", "alice", f"note for everyone: the door code is {SECRET}")
    wait_for(lambda: _replies(d, "general") >= 1, 60, "alice's message answered")
    erased = _forget(d)
    if backend == "postgres":
        assert "VACUUM (FULL)" in erased["until_vacuum"]
        assert erased["remaining"] == {}
    else:
        assert erased["until_vacuum"] is None
        assert erased["vacuumed"] is False  # every connection zeroes what it frees: nothing to rebuild
