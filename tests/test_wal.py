"""Disk bounded: the WAL is checkpointed and truncated while the daemon runs.

The mechanism, not a timing: every connection sets ``journal_size_limit`` (and
``secure_delete``); a keeper round truncates the WAL to nothing, is kept from it while a
reader holds an old snapshot (and says so), and gets through once the reader is done;
the daemon runs the keeper every ``[database] checkpoint_seconds``. ``bench/wal.py``
measures the WAL's size over a thousand messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from agentd.store import Store
from agentd.store.walkeeper import JOURNAL_SIZE_LIMIT, WalKeeper
from tests.conftest import BUDDY
from tests.support import Running, wait_for


def _wal(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _write(store: Store, n: int) -> None:
    with store.write() as conn:
        for i in range(n):
            store.messages.add(
                conn, channel="general", role="user", author="bob", content=f"message {i} " * 50, status="complete"
            )


def test_every_connection_limits_the_journal_and_zeroes_what_it_frees(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'agentd.db'}")
    try:
        with store.read() as a, store.read() as b, store.write() as w:
            for conn in (a, b, w):
                assert conn.exec_driver_sql("PRAGMA journal_size_limit").scalar() == JOURNAL_SIZE_LIMIT
                assert conn.exec_driver_sql("PRAGMA secure_delete").scalar() == 1
    finally:
        store.close()


def test_a_round_truncates_the_wal_unless_a_reader_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "agentd.db"
    store = Store.open(f"sqlite:///{path}")
    keeper = WalKeeper(store, interval=0)
    try:
        _write(store, 200)
        assert _wal(path) > 0
        with store.read() as reader:
            reader.execute(sa.text("SELECT count(*) FROM messages")).scalar()  # holds its snapshot
            _write(store, 50)  # frames the reader's snapshot predates
            held = _wal(path)
            assert keeper.round() is False
            assert keeper.kept == 1
            assert _wal(path) >= held
        assert keeper.round() is True
        assert _wal(path) == 0
        assert keeper.truncated == 1
    finally:
        store.close()


def test_the_daemon_runs_the_keeper(daemons: Any) -> None:
    d: Running = daemons('[channels.general]\npersonas = ["buddy"]\n', personas={"buddy": BUDDY})
    wal = d.server.wal
    assert wal.running  # started with the daemon, every [database] checkpoint_seconds (30)
    assert wal.interval == d.app.config.database.checkpoint_seconds == 30
    for i in range(5):
        r = d.client.post("/v1/channels/general/messages", json={"user": "bob", "text": f"hello {i}"})
        assert r.status_code == 202
    wait_for(lambda: len(d.messages("general")) >= 10, 60, "the replies")
    path = d.home.parent / "agentd.db"
    assert _wal(path) > 0
    wait_for(wal.round, 60, "a round that truncates the WAL of a serving daemon")
    d.server.request_stop()
    d.thread.join(60)
    assert not wal.running
