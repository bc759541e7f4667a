"""Backups of a store: a consistent copy of a live SQLite file, checked; restoring one, checked first.

**SQLite.** :func:`backup_sqlite` copies the database with SQLite's online backup
API in one step: the copy is the database as one read transaction saw it, while
the daemon goes on writing (in WAL mode a reader blocks no writer). The copy is
then checked (:func:`check_sqlite`): SQLite's header, its length against the
page count the header gives (a truncated file), ``PRAGMA integrity_check``, the
schema revision (one of this release's), and the rows of each kind.
:func:`restore_sqlite` checks a copy the same way before it replaces the
database (with the daemon stopped), and keeps the replaced file beside it.

**PostgreSQL.** :func:`backup_postgres` runs ``pg_dump --format=custom`` (the
server's own consistent snapshot) and checks the archive with ``pg_restore
--list``; restore with ``pg_restore`` into an empty database
(docs/guides/backup.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
import sqlean

from agentd._exceptions import StoreError
from agentd.store.engine import vec0_path

#: The first 16 bytes of every SQLite database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: Tables whose rows a check counts.
COUNTED = ("channels", "messages", "memories", "context_records", "memory_history", "api_keys")
#: The longest ``pg_dump`` / ``pg_restore --list`` may take, in seconds.
PG_DUMP_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Checked:
    """A database file that passed every check: its size, schema revision and rows of each kind."""

    path: Path
    size: int
    revision: str
    counts: dict[str, int]


def _connect(path: Path, *, read_only: bool) -> sqlean.Connection:
    uri = f"file:{path}?immutable=1" if read_only else str(path)
    conn = sqlean.connect(uri, uri=read_only, isolation_level=None, timeout=5.0, check_same_thread=False)
    conn.enable_load_extension(True)
    conn.load_extension(vec0_path())
    conn.enable_load_extension(False)
    return conn


def _header(path: Path) -> tuple[int, int]:
    """``(page size, pages)`` from the file's header; :class:`StoreError` if it is not a SQLite database."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror}") from exc
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        raise StoreError(f"{path} is not a SQLite database (no SQLite header)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    # The header's page count is valid when the change counter matches "version valid for".
    if head[24:28] != head[92:96]:
        pages = 0
    return page_size, pages


def check_sqlite(path: Path, known_revisions: set[str]) -> Checked:
    """Check a SQLite database file; :class:`StoreError` naming what is wrong if a check fails."""
    if not path.is_file():
        raise StoreError(f"{path} is not a file")
    size = path.stat().st_size
    page_size, pages = _header(path)
    if size % page_size or (pages and size < pages * page_size):
        raise StoreError(
            f"{path} is truncated or damaged: {size:,} bytes, where its header says "
            f"{pages:,} pages of {page_size:,} bytes ({pages * page_size:,} bytes)"
        )
    try:
        conn = _connect(path, read_only=True)
    except sqlean.Error as exc:
        raise StoreError(f"{path} cannot be opened: {exc}") from exc
    try:
        problems = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(20)").fetchall()]
        if problems != ["ok"]:
            raise StoreError(f"{path} is damaged (integrity_check): " + "; ".join(problems[:5]))
        tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "alembic_version" not in tables:
            raise StoreError(f"{path} is not an agentd database (no schema revision)")
        found = [str(r[0]) for r in conn.execute("SELECT version_num FROM alembic_version")]
        if len(found) != 1:
            raise StoreError(f"{path} has {len(found)} schema revisions; expected one")
        revision = found[0]
        if revision not in known_revisions:
            raise StoreError(
                f"{path} is at schema revision {revision}, which this agentd does not know "
                f"(newest: {max(known_revisions)}): it was written by a newer release; upgrade agentd first"
            )
        counts = {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in COUNTED if t in tables}
    except sqlean.DatabaseError as exc:
        raise StoreError(f"{path} is damaged: {exc}") from exc
    finally:
        conn.close()
    return Checked(path, size, revision, counts)


def backup_sqlite(source: Path, destination: Path, known_revisions: set[str]) -> Checked:
    """Copy the live database ``source`` to the new file ``destination`` and check the copy."""
    if destination.exists():
        raise StoreError(f"{destination} exists: name a new file")
    if not destination.parent.is_dir():
        raise StoreError(f"{destination.parent} is not a directory")
    partial = destination.with_name(destination.name + ".partial")
    src = _connect(source, read_only=False)
    try:
        out = sqlean.connect(str(partial), isolation_level=None)
        try:
            # One step: the whole copy under one read transaction, a consistent snapshot; writers go on.
            src.backup(out, pages=-1)
            # A file on its own: no WAL beside it.
            out.execute("PRAGMA journal_mode = DELETE")
        finally:
            out.close()
    except sqlean.Error as exc:
        partial.unlink(missing_ok=True)
        raise StoreError(f"cannot back up {source} to {destination}: {exc}") from exc
    finally:
        src.close()
    try:
        checked = check_sqlite(partial, known_revisions)
    except StoreError:
        partial.unlink(missing_ok=True)
        raise
    _sync(partial)
    os.replace(partial, destination)
    return Checked(destination, checked.size, checked.revision, checked.counts)


def restore_sqlite(backup: Path, database: Path, known_revisions: set[str]) -> tuple[Checked, Path | None]:
    """Check ``backup``, then make it the database at ``database`` (the daemon must be stopped);
    the file it replaces is kept as ``<database>.before-restore``, returned with the check."""
    checked = check_sqlite(backup, known_revisions)
    incoming = database.with_name(database.name + ".restoring")
    shutil.copyfile(backup, incoming)
    _sync(incoming)
    kept: Path | None = None
    if database.exists():
        # Fold the old WAL into the old file first: a WAL left beside the restored file would be
        # replayed into it.
        old = _connect(database, read_only=False)
        try:
            busy = old.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlean.Error as exc:
            incoming.unlink(missing_ok=True)
            raise StoreError(f"cannot restore over {database}: {exc}") from exc
        finally:
            old.close()
        if busy:
            incoming.unlink(missing_ok=True)
            raise StoreError(f"{database} is in use (a daemon or another command has it open): stop it first")
        kept = database.with_name(database.name + ".before-restore")
        os.replace(database, kept)
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    os.replace(incoming, database)
    return Checked(database, checked.size, checked.revision, checked.counts), kept


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """``url`` as libpq reads it, and the environment that carries its password (never argv)."""
    parsed = sa.engine.make_url(url)
    env = dict(os.environ)
    if parsed.password:
        env["PGPASSWORD"] = str(parsed.password)
    plain = parsed.set(drivername="postgresql", password=None)
    return plain.render_as_string(hide_password=False), env


def backup_postgres(url: str, destination: Path, pg_dump: str = "pg_dump") -> Checked:
    """``pg_dump --format=custom`` of the database at ``url`` into ``destination``, checked with
    ``pg_restore --list`` (the ``pg_restore`` beside ``pg_dump``); its counts are the archive's entries."""
    if destination.exists():
        raise StoreError(f"{destination} exists: name a new file")
    program = shutil.which(pg_dump)
    if program is None:
        raise StoreError(
            f"{pg_dump} not found: install PostgreSQL's client programs (the server's major version or newer), "
            "or name one with --pg-dump"
        )
    restore = Path(program).with_name("pg_restore")
    dsn, env = _libpq(url)
    partial = destination.with_name(destination.name + ".partial")
    _run([program, "--format=custom", "--no-owner", f"--file={partial}", f"--dbname={dsn}"], env, "pg_dump")
    try:
        listing = _run([str(restore), "--list", str(partial)], env, "pg_restore --list")
    except StoreError:
        partial.unlink(missing_ok=True)
        raise
    entries = [line for line in listing.splitlines() if line and not line.startswith(";")]
    data = sum(1 for line in entries if " TABLE DATA " in line)
    if not any(" TABLE DATA " in line and " alembic_version " in line for line in entries):
        partial.unlink(missing_ok=True)
        raise StoreError(f"the dump of {dsn} holds no agentd schema (alembic_version)")
    os.replace(partial, destination)
    return Checked(destination, destination.stat().st_size, "", {"archive_entries": len(entries), "tables": data})


def _run(argv: list[str], env: dict[str, str], what: str) -> str:
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=PG_DUMP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise StoreError(f"{what} took longer than {PG_DUMP_TIMEOUT_S:g} s") from exc
    except OSError as exc:
        raise StoreError(f"cannot run {argv[0]}: {exc.strerror}") from exc
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else str(done.returncode)
        if "version mismatch" in done.stderr:
            why += f" ({argv[0]} is older than the server: name one of its major version or newer with --pg-dump)"
        raise StoreError(f"{what} failed: {why}")
    return done.stdout
