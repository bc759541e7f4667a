"""The test run's shared PostgreSQL server (tests/support/pgserver.py) starts only when a test asks for it.

Under xdist the controller makes a :class:`SharedServer` for every run; the server itself
starts when a worker first calls :func:`shared_port`, so a run none of whose tests needs
PostgreSQL (``pytest -m fast``) starts none. The real server is exercised by every
``both_backends`` test; here ``start_server`` is replaced by a recorder, to see when it is called.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.support import pgserver, wait_for


class Started:
    """What ``start_server`` was asked for, standing in for the server it would start."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.stopped = 0
        self.port = 54321

    def __call__(self, processes: int = 1) -> Started:
        self.calls.append(processes)
        return self

    def stop(self) -> None:
        self.stopped += 1


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Started:
    recorder = Started()
    monkeypatch.setattr(pgserver, "start_server", recorder)
    return recorder


def test_a_run_that_never_asks_starts_no_server(started: Started) -> None:
    shared = pgserver.SharedServer(2)
    shared.stop()
    assert started.calls == []
    assert not shared.directory.exists()


def test_the_first_worker_to_ask_starts_it_once_and_every_worker_gets_its_port(started: Started) -> None:
    shared = pgserver.SharedServer(2)
    ports: list[Any] = []
    workers = [threading.Thread(target=lambda: ports.append(pgserver.shared_port(str(shared.directory)))) for _ in "ab"]
    for worker in workers:
        worker.start()
    wait_for(lambda: len(ports) == 2, 30, "both workers to get the port")
    assert ports == [54321, 54321]
    assert started.calls == [2]
    shared.stop()
    assert started.stopped == 1
    assert not shared.directory.exists()
