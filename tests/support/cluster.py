"""Three ``agentd serve`` processes on one PostgreSQL database (tests/test_cluster.py, tests/test_metrics.py;
the ``cluster`` fixture in conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.homes import write_home
from tests.support.serve import Serve

#: The persona every daemon of the cluster runs: it answers channels ``c*`` offline.
ECHO = """
name = "echo"
model = "offline"
max_reply_tokens = 256
channels = ["c*"]
skills = []
system_prompt = "You answer briefly."
"""
#: Their config: no embedder, a short grace and quick cluster leases.
CLUSTER_CONFIG = """
[embedding]
provider = "none"
[daemon]
shutdown_grace_seconds = 2
[cluster]
heartbeat_seconds = 0.5
lease_seconds = 4
"""


@contextmanager
def three_daemons(tmp_path: Path, url: str) -> Iterator[list[Serve]]:
    """Three daemons on the database at ``url``, each with its own home under ``tmp_path``; all stopped after."""
    started: list[Serve] = []
    try:
        for i in range(3):
            home = write_home(tmp_path / f"d{i}", CLUSTER_CONFIG, {"echo": ECHO}, url)
            started.append(Serve(home))
        yield started
    finally:
        for serve in started:
            serve.stop()
