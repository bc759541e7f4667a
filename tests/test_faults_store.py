"""The disk fills during a turn: the outcome the client hears is the one the store holds.

The daemon's database lives on a small tmpfs that the test fills with a file, as
a disk fills up; deleting the file frees it again. Mounting needs root (as on
the project's machines); elsewhere the test is skipped, saying why.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.store.engine import create_engine
from tests.fakeopenai import Turn
from tests.support import read_sse, wait_for

LONG_REPLY = " ".join(f"word{i}" for i in range(60))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path/home0`` (the first daemon's home) on a 32 MB tmpfs."""
    mount = tmp_path / "home0"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(directory: Path) -> Path:
    """Write a file until the file system is full; return it."""
    filler = directory / "filler"
    block = b"\0" * (1 << 16)
    with filler.open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(block)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler


def test_a_full_disk_mid_turn_never_tells_the_client_something_the_store_does_not_hold(
    small_disk, daemons, fake_openai
) -> None:
    d = daemons('[embedding]\nprovider = "none"\n')
    assert d.home.parent == small_disk  # the database is on the small disk
    fake_openai.chat_delay_per_token = 0.02
    fake_openai.queue(Turn(text=LONG_REPLY))
    body = {"persona": "fake", "channel": "general", "user": "alice", "message": "tell me a story"}
    events = []
    with d.client.stream("POST", "/v1/chat", json=body) as response:
        user_id = int(response.headers["X-Agentd-Message-Id"])
        for event in read_sse(response.iter_lines()):
            events.append(event)
            if event.event == "token_delta" and len(events) == 3:
                # The disk fills: the WAL is emptied first (an idle checkpoint, as SQLite does), so
                # the reply's commit needs new space.
                engine = create_engine(f"sqlite:///{small_disk / 'agentd.db'}")
                with engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                engine.dispose()
                filler = fill(small_disk)
    last = events[-1]
    assert last.event == "error", last.data
    assert last.data["code"] == "store_error", last.data
    assert "stays pending" in last.data["message"]
    health = d.client.get("/healthz").json()
    assert health["healthy"] is False
    assert health["status"] == "degraded"
    assert health["store"]["writable"] is False
    assert "full" in health["store"]["error"]
    # A message accepted while the disk is full: refused with 503, not stored, not answered later.
    refused = d.client.post("/v1/channels/general/messages", json={"persona": "fake", "user": "bob", "text": "hi"})
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "store_error"
    filler.unlink()  # space again
    # What the store holds is what the client was told: the message is pending, with no reply.
    with d.app.store.read() as conn:
        user = d.app.store.messages.get(conn, user_id)
        replies = d.app.store.messages.replies_to(conn, [user_id])
        assert [m.author for m in d.app.store.messages.after(conn, "general", 0)] == ["alice"]
    assert user is not None
    assert user.status == "pending"
    assert replies == {}
    later = d.chat("and now?")
    assert later[-1].event == "done"
    wait_for(lambda: d.client.get("/healthz").json()["healthy"], 10, "healthz to say healthy again")
    assert d.client.get("/healthz").json()["store"] == {"writable": True}
