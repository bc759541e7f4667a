"""What a store's backend can do, stated by the store: the runtime and the prompt ask these
questions, never which database it is (tests/test_layers.py keeps backend names inside store/)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """The answers of one backend."""

    #: Several daemons may share the store (a server they all reach): a daemon holds a channel before
    #: it answers it, and another daemon may write any row at any time.
    shared_by_daemons: bool
    #: Sessions hold locks on keys for as long as they live, released when they die (PostgreSQL's
    #: advisory locks): how daemons that share the store own channels (the cluster router).
    advisory_locks: bool
    #: One daemon's worker processes can open the store themselves and take turns writing it (a
    #: file on this machine): the worker pool.
    worker_processes: bool
    #: Rows read are still true until this daemon writes (no other daemon writes the store): a cache
    #: of a channel's newest rows stays valid (the prompt's history cache).
    rows_stay_as_read: bool


SQLITE = Capabilities(shared_by_daemons=False, advisory_locks=False, worker_processes=True, rows_stay_as_read=True)
POSTGRESQL = Capabilities(shared_by_daemons=True, advisory_locks=True, worker_processes=False, rows_stay_as_read=False)


def capabilities_of(backend: str) -> Capabilities:
    """The capabilities of ``backend`` (``"sqlite"`` or ``"postgresql"``)."""
    return POSTGRESQL if backend == "postgresql" else SQLITE
