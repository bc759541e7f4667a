"""``agentd db backup`` while the daemon serves and writes, and ``agentd db restore``, which checks first."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from agentd.store import Store
from testkit.pgembedded import bin_dir
from tests.conftest import BUDDY, agentd_cli, write_home
from tests.support import Running, wait_for
from tests.support.pgserver import PostgresDatabases

#: The PostgreSQL client programs of the server the tests run (the system's may be older).
PG_BIN = bin_dir()


def _posting(d: Running, stop: threading.Event, posted: list[int]) -> threading.Thread:
    def run() -> None:
        i = 0
        while not stop.is_set():
            r = d.client.post("/v1/channels/general/messages", json={"user": f"u{i % 3}", "text": f"note number {i}"})
            assert r.status_code == 202, r.text
            posted.append(int(r.json()["id"]))
            i += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.both_backends
def test_a_backup_taken_while_the_daemon_serves_and_writes_opens_and_checks(
    daemons: Any, backend: str, tmp_path: Path, postgres: PostgresDatabases
) -> None:
    d: Running = daemons('[channels.general]\npersonas = ["buddy"]\n', personas={"buddy": BUDDY})
    stop, posted = threading.Event(), []
    writer = _posting(d, stop, posted)
    try:
        wait_for(lambda: len(posted) >= 5, 60, "posts under way")
        before = len(posted)
        target = tmp_path / "copy.db"
        done = agentd_cli("db", "backup", str(target), "--pg-dump", str(PG_BIN / "pg_dump"), config=d.home)
        during = len(posted) - before
    finally:
        stop.set()
        writer.join(30)
    assert done.returncode == 0, done.stderr
    assert "backed up" in done.stdout
    assert "checked" in done.stdout
    assert f"({target.stat().st_size:,} bytes)" in done.stdout
    assert during > 0, "no post landed while the backup ran"
    if backend == "sqlite":
        assert not Path(f"{target}-wal").exists()
        copy = Store.open(f"sqlite:///{target}")
        try:
            with copy.read() as conn:
                assert conn.exec_driver_sql("PRAGMA integrity_check").scalar_one() == "ok"
                assert conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []
                n = conn.execute(sa.text("SELECT count(*) FROM messages WHERE role = 'user'")).scalar_one()
            assert before <= n <= len(posted)
        finally:
            copy.close()
    else:
        empty = postgres.fresh(migrated=False)
        url = sa.engine.make_url(empty).set(drivername="postgresql").render_as_string(hide_password=False)
        restored = subprocess.run(
            [str(PG_BIN / "pg_restore"), "--no-owner", f"--dbname={url}", str(target)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert restored.returncode == 0, restored.stderr
        copy = Store.open(empty)
        try:
            with copy.read() as conn:
                n = conn.execute(sa.text("SELECT count(*) FROM messages WHERE role = 'user'")).scalar_one()
            assert before <= n <= len(posted)
        finally:
            copy.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_restore_checks_the_copy_first_and_refuses_a_bad_one(home: Path, tmp_path: Path) -> None:
    assert agentd_cli("memory", "add", "the boat is blue", "--persona", "buddy", config=home).returncode == 0
    good = tmp_path / "good.db"
    made = agentd_cli("db", "backup", str(good), config=home)
    assert made.returncode == 0, made.stderr
    assert agentd_cli("db", "backup", str(good), config=home).returncode == 1  # never over an existing file
    assert agentd_cli("memory", "add", "the car is red", "--persona", "buddy", config=home).returncode == 0
    database = home.parent / "agentd.db"
    original = _digest(database)
    data = good.read_bytes()

    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(data[: len(data) // 2])
    damaged = tmp_path / "damaged.db"
    page = int.from_bytes(data[16:18], "big") or 65536
    damaged.write_bytes(data[: 2 * page] + bytes(page) + data[3 * page :])
    newer = tmp_path / "newer.db"
    newer.write_bytes(data)
    engine = sa.create_engine(f"sqlite:///{newer}")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    other = tmp_path / "notes.txt"
    other.write_text("not a database at all, but long enough to have a header's worth of bytes " * 3)
    for bad, why in (
        (truncated, "truncated"),
        (damaged, "damaged"),
        (newer, "newer release"),
        (other, "not a SQLite database"),
    ):
        refused = agentd_cli("db", "restore", str(bad), config=home)
        assert refused.returncode == 1, (bad, refused.stdout)
        assert why in refused.stderr, refused.stderr
        assert _digest(database) == original  # nothing changed

    restored = agentd_cli("db", "restore", str(good), config=home)
    assert restored.returncode == 0, restored.stderr
    listed = agentd_cli("memory", "list", "--persona", "buddy", config=home)
    assert "the boat is blue" in listed.stdout
    assert "the car is red" not in listed.stdout
    assert _digest(home.parent / "agentd.db.before-restore") == original


def test_a_pg_dump_older_than_the_server_is_refused_naming_the_way_out(
    tmp_path: Path, postgres: PostgresDatabases
) -> None:
    """``agentd db backup PATH`` on PostgreSQL runs the ``pg_dump`` on ``PATH``; one of an older
    major version than the server refuses to dump it, and the error says what to do."""
    found = shutil.which("pg_dump")
    if found is None:
        pytest.skip("no pg_dump on PATH")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30).stdout
    major = re.search(r"\) (\d+)", version)
    if major is None or int(major.group(1)) >= 18:
        pytest.skip(f"the pg_dump on PATH is not older than the server: {version.strip()}")
    url = postgres.fresh()
    try:
        home = write_home(tmp_path, database_url=url)
        refused = agentd_cli("db", "backup", str(tmp_path / "copy.dump"), config=home)
    finally:
        postgres.drop(url)
    assert refused.returncode == 1, refused.stdout
    assert "older than the server" in refused.stderr, refused.stderr
    assert "--pg-dump" in refused.stderr
    assert not (tmp_path / "copy.dump").exists()
