"""The tests' one support package: what more than one test module uses lives here (a test module never
imports another; tests/test_layers.py checks). This module: the repository's root, a daemon running in a
thread (its ``daemons`` fixture is in conftest.py), waiting with a deadline, and a small SSE reader written
independently of agentd's own client. Beside it: :mod:`~tests.support.homes` (agentd homes),
:mod:`~tests.support.fakeopenai` (a fake OpenAI server), :mod:`~tests.support.pgserver` (the run's
PostgreSQL), :mod:`~tests.support.serve` (``agentd serve`` in a subprocess), :mod:`~tests.support.workers`,
:mod:`~tests.support.cluster`, :mod:`~tests.support.dispatch`, :mod:`~tests.support.mcptools`,
:mod:`~tests.support.processes`, :mod:`~tests.support.synapse`. What
bench/ shares with the tests is in the top-level package ``testkit``."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentd.api import DaemonServer
from agentd.app import App

#: The repository's root.
REPO = Path(__file__).resolve().parent.parent.parent

#: Why a test runs its ``daemons`` on local actors (``@pytest.mark.local_actors(REASON)``) rather than
#: the worker processes ``agentd serve`` runs by default: it reads counters off ``/metrics`` that a
#: turn increments. The in-process daemon serves the test process's own metrics; a worker counts in
#: a registry of its own (``agentd serve`` adds them up through a multiprocess directory, which
#: tests/test_metrics.py checks with worker processes).
COUNTS_TURNS_ON_METRICS = "counts what a turn did on /metrics, which shows only the test process's own counts"
#: ... or it reads the turn's log lines from its captured stderr (``capfd``): a worker process writes
#: to the stderr its fork server inherited when the first worker of the run started.
READS_THE_TURNS_LOG = "reads the turn's log lines from the stderr the test captures, which a worker does not write to"

#: Debian's Chromium and its driver (never a downloaded browser), and the flags every headless run
#: here needs: without the background-networking ones Chromium keeps dialling hosts this machine
#: cannot reach. Shared by tests/test_web.py and docs/pictures.py.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition", every: float = 0.02) -> Any:
    """Poll ``predicate`` every ``every`` seconds until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        pause.wait(every)


@dataclass(frozen=True)
class SSE:
    """One server-sent event as a client sees it."""

    event: str
    data: dict[str, Any]
    id: str | None = None


def read_sse(lines: Iterator[str], on_line: Callable[[str], None] | None = None) -> Iterator[SSE]:
    """Parse ``text/event-stream`` lines (written independently of agentd's own client)."""
    event, data, ident = "message", [], None
    for line in lines:
        if on_line is not None:
            on_line(line)
        if line == "":
            if data:
                yield SSE(event, json.loads("\n".join(data)), ident)
            event, data, ident = "message", [], None
        elif not line.startswith(":"):
            key, _, value = line.partition(": ")
            if key == "event":
                event = value
            elif key == "data":
                data.append(value)
            elif key == "id":
                ident = value


@dataclass
class Running:
    """A daemon serving in a thread."""

    server: DaemonServer
    app: App
    client: httpx.Client
    thread: threading.Thread
    home: Path

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def turn_processes(self) -> int:
        """How many processes run this daemon's turns: its workers, or itself."""
        return len(self.server.runtime.worker_pids) or 1

    def chat(
        self, message: str, persona: str = "fake", channel: str = "general", user: str = "alice", **extra: Any
    ) -> list[SSE]:
        """POST /v1/chat and read the whole event stream."""
        body = {"persona": persona, "channel": channel, "user": user, "message": message, **extra}
        with self.client.stream("POST", "/v1/chat", json=body) as response:
            assert response.status_code == 200, response.read()
            assert response.headers["content-type"].startswith("text/event-stream")
            return list(read_sse(response.iter_lines()))

    def messages(self, channel: str, after: int = 0) -> list[dict[str, Any]]:
        response = self.client.get(f"/v1/channels/{channel}/messages", params={"after": after, "limit": 1000})
        assert response.status_code == 200, response.text
        return response.json()["messages"]  # type: ignore[no-any-return]


@dataclass
class Follower:
    """Reads a channel's event stream on a thread, collecting its events."""

    events: list[SSE] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[SSE]:
        with self.lock:
            return list(self.events)


def follow(
    client: httpx.Client,
    channel: str,
    headers: dict[str, str] | None = None,
    params: dict[str, Any] | None = None,
    until: Callable[[list[SSE]], bool] = lambda _events: False,
) -> tuple[Follower, threading.Thread]:
    """Start following ``channel``; ``ready`` is set once the stream's first line arrived."""
    follower = Follower()

    def run() -> None:
        try:
            with client.stream(
                "GET", f"/v1/channels/{channel}/events", headers=headers or {}, params=params or {}
            ) as response:
                assert response.status_code == 200
                for ev in read_sse(response.iter_lines(), on_line=lambda _l: follower.ready.set()):
                    with follower.lock:
                        follower.events.append(ev)
                        done = until(follower.events)
                    if done:
                        return
        except httpx.TransportError:
            if not client.is_closed:
                raise  # the stream broke while the test still follows it
            # else the test is over and closed its client under the endless stream

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return follower, thread
