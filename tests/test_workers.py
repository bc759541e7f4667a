"""Turns answered in worker processes: ``agentd serve`` with ``[runtime] workers = 2``, in a
subprocess, through the API over real HTTP, the offline model and the real local embedder
in every process. Each channel is answered by one worker, in order; every accepted message
is answered once, across a worker killed mid-run and a daemon stopped mid-run. A worker that
keeps dying young, or whose process cannot be made (the one test that makes the workers
itself, with process creation failing), is started again after growing pauses."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.config import load_config
from agentd.runtime.scaleout.workers import shard_of
from agentd.store import Store
from tests.conftest import write_home
from tests.support import read_sse, wait_for
from tests.support.serve import Serve
from tests.support.workers import WORKERS, channels_of_both_workers, post_all, replies_of, wait_answered

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    started: list[Serve] = []

    def start(config: str = WORKERS) -> Serve:
        s = Serve(write_home(tmp_path, config))
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def worker_pids(url: str) -> list[int]:
    """The workers' process ids, once every one runs (the daemon starts them on a thread)."""

    def running() -> list[int]:
        pids = [w["pid"] for w in httpx.get(url + "/healthz", timeout=30).json()["workers"]]
        return pids if None not in pids else []

    return list(wait_for(running, 60, "every worker to run"))


def restarted(url: str, victim: int) -> bool:
    """Whether worker 0 runs again, in a process other than ``victim``."""
    return httpx.get(url + "/healthz", timeout=30).json()["workers"][0]["pid"] not in (None, victim)


def test_every_message_is_answered_once_in_order_by_the_worker_that_owns_its_channel(daemon: Any) -> None:
    running = daemon()
    channels = channels_of_both_workers(6)
    accepted = post_all(running.url, channels, 6)
    home = Path(running.proc.args[2])
    found = wait_answered(home, [mid for _c, mid in accepted])
    assert all(len(found[mid]) == 1 for _c, mid in accepted)  # once each
    for channel in channels:  # in order: replies follow the order of their messages
        reply_ids = [found[mid][0][0] for mid in sorted(mid for c, mid in accepted if c == channel)]
        assert reply_ids == sorted(reply_ids)
    health = httpx.get(running.url + "/healthz", timeout=30).json()
    workers = health["workers"]
    assert [w["worker"] for w in workers] == [0, 1]
    assert all(w["running"] and w["answered"] for w in workers)
    pids = {w["pid"] for w in workers}
    assert len(pids) == 2
    assert running.proc.pid not in pids
    # Forked by one fork server (which imported what they need once), itself the daemon's child.
    parents = {_parent(pid) for pid in pids}
    assert len(parents) == 1
    assert running.proc.pid not in parents
    fork_server = parents.pop()
    assert _parent(fork_server) == running.proc.pid
    # The one the daemon started first thing (agentd serve: start_fork_server), not a second one.
    assert [pid for pid in _children(running.proc.pid) if b"forkserver" in _cmdline(pid)] == [fork_server]
    # Below the daemon's priority ([runtime] worker_niceness, 10 by default), every thread of them:
    # when turns fill the cores, accepting a message does not wait behind them.
    expected = min(19, os.getpriority(os.PRIO_PROCESS, running.proc.pid) + 10)
    for pid in pids:
        assert _thread_niceness(pid) == {expected}
    # Both workers answered: each reports the actors of its own channels, and only those.
    by_channel = {a["channel"] for a in health["actors"]}
    assert set(channels) <= by_channel


def test_a_streamed_chat_recalls_a_memory_a_worker_learned(daemon: Any) -> None:
    running = daemon()
    with httpx.Client(base_url=running.url, timeout=60) as client:
        stored = client.post(
            "/v1/chat",
            json={"persona": "buddy", "channel": "general", "user": "ann", "message": "remember that I like Python"},
        )
        assert stored.status_code == 200
        assert "event: tool_result" in stored.text
        assert "event: done" in stored.text
        with client.stream(
            "POST",
            "/v1/chat",
            json={"persona": "buddy", "channel": "general", "user": "ann", "message": "which language do I like?"},
        ) as answer:
            events = list(read_sse(answer.iter_lines()))
        # The daemon's own process (the memory API) reads what the worker wrote.
        found = client.post("/v1/memory/search", json={"query": "python", "persona": "buddy", "userId": "ann"})
    names = [e.event for e in events]
    assert names[0] == "memory_context"
    assert names[-1] == "done"
    assert "token_delta" in names
    assert any("Python" in m["text"] for m in events[0].data["memories"])
    assert any("Python" in r["text"] for r in found.json()["results"])


def test_a_killed_worker_is_started_again_and_nothing_accepted_is_lost_or_answered_twice(daemon: Any) -> None:
    running = daemon()
    channels = channels_of_both_workers(4)
    victim = worker_pids(running.url)[0]
    done = threading.Event()
    accepted: list[tuple[str, int]] = []

    def keep_posting() -> None:
        while not done.is_set():
            accepted.extend(post_all(running.url, channels, 2))

    poster = threading.Thread(target=keep_posting)
    poster.start()
    try:
        wait_for(lambda: len(accepted) >= 8, 60, "posts before the kill")
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: restarted(running.url, victim), 60, "worker 0 to be started again")
        count = len(accepted)
        wait_for(lambda: len(accepted) >= count + 8, 60, "posts after the restart")
    finally:
        done.set()
        poster.join(120)
    home = Path(running.proc.args[2])
    found = wait_answered(home, [mid for _c, mid in accepted])
    assert all(len(found[mid]) == 1 for _c, mid in accepted)


def test_sigterm_drains_the_workers_and_a_restart_answers_what_was_pending(daemon: Any, tmp_path: Path) -> None:
    running = daemon()
    channels = channels_of_both_workers(4)
    accepted = post_all(running.url, channels, 5)
    pids = worker_pids(running.url)
    running.proc.send_signal(signal.SIGTERM)
    assert running.proc.wait(60) == 0, "".join(running.stderr)
    for pid in pids:  # no worker outlives its daemon
        wait_for(lambda pid=pid: not _alive(pid), 30, f"worker {pid} to exit")
    home = Path(running.proc.args[2])
    left = pending_in(home)
    again = daemon()  # answers whatever the first one left pending
    found = wait_answered(home, [mid for _c, mid in accepted])
    assert all(len(found[mid]) == 1 for _c, mid in accepted)
    assert left <= set(found)
    again.proc.send_signal(signal.SIGTERM)
    assert again.proc.wait(60) == 0


def test_sigterm_to_the_whole_process_group_still_lets_the_daemon_stop_its_workers(tmp_path: Path) -> None:
    """systemd's default (``KillMode=control-group``), ``timeout`` and a terminal signal every
    process of the daemon at once: the workers and their fork server ignore it, the daemon drains
    them as on its own SIGTERM (none dies of the signal or is left orphaned), and all of them exit."""
    running = Serve(write_home(tmp_path, WORKERS), new_session=True)
    try:
        accepted = post_all(running.url, channels_of_both_workers(4), 3)
        pids = worker_pids(running.url)
        fork_server = _parent(pids[0])
        os.killpg(running.proc.pid, signal.SIGTERM)
        assert running.proc.wait(60) == 0, "".join(running.stderr)
        for pid in (*pids, fork_server):
            wait_for(lambda pid=pid: not _alive(pid), 30, f"process {pid} to exit")
    finally:
        running.stop()
    log = "".join(running.stderr)
    assert "worker_died" not in log, log
    assert "worker_orphaned" not in log, log
    home = Path(running.proc.args[2])
    found = replies_of(home)
    pending = pending_in(home)
    # Each accepted message was answered once, or is kept for the next start.
    assert all(len(found.get(mid, [])) == 1 or mid in pending for _c, mid in accepted)


def test_a_daemon_killed_outright_leaves_no_worker_or_fork_server_behind(daemon: Any) -> None:
    """kill -9 of the daemon: its workers see their pipes close and stop, its fork server sees its
    own close and exits; what was accepted and not answered is answered after the next start."""
    running = daemon()
    accepted = post_all(running.url, channels_of_both_workers(4), 2)
    pids = worker_pids(running.url)
    fork_server = _parent(pids[0])
    running.proc.kill()
    running.proc.wait(10)
    for pid in (*pids, fork_server):
        wait_for(lambda pid=pid: not _alive(pid), 30, f"process {pid} to exit")
    home = Path(running.proc.args[2])
    again = daemon()
    found = wait_answered(home, [mid for _c, mid in accepted])
    assert all(len(found[mid]) == 1 for _c, mid in accepted)
    again.proc.send_signal(signal.SIGTERM)
    assert again.proc.wait(60) == 0


def test_workers_are_validated_and_auto_means_one_per_cpu_on_sqlite(tmp_path: Path) -> None:
    from agentd._exceptions import ConfigError
    from agentd.config import AUTO_WORKERS_MAX, RuntimeConfig

    with pytest.raises(ConfigError, match=r"runtime\.workers"):
        load_config(write_home(tmp_path, "[runtime]\nworkers = -1\n"), environ={})
    with pytest.raises(ConfigError, match=r"runtime\.worker_niceness"):
        load_config(write_home(tmp_path, "[runtime]\nworker_niceness = 20\n"), environ={})
    cpus = os.cpu_count() or 1
    assert RuntimeConfig().worker_count("sqlite") == (min(cpus, AUTO_WORKERS_MAX) if cpus >= 2 else 0)
    assert RuntimeConfig(workers=3).worker_count("sqlite") == 3
    assert RuntimeConfig(workers=3).worker_count("postgresql") == 0  # several daemons scale PostgreSQL out
    names = [f"c{i}" for i in range(200)]
    assert {shard_of(n, 4) for n in names} == {0, 1, 2, 3}
    # A delegation's child channel is answered with its parent.
    assert all(shard_of(f"{n}~helper", 4) == shard_of(n, 4) for n in names)


def pending_in(home: Path) -> set[int]:
    """The ids of the messages still pending in ``home``'s store."""
    store = Store.open(load_config(home, environ={}).database_url)
    try:
        with store.read() as conn:
            return {m.id for m in store.messages.with_status(conn, "pending")}
    finally:
        store.close()


def _stat(path: Path) -> list[str]:
    """A ``/proc`` stat file's fields after the command's name (from the state on)."""
    return path.read_text().rsplit(")", 1)[1].split()


def _parent(pid: int) -> int:
    return int(_stat(Path(f"/proc/{pid}/stat"))[1])


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _parent(int(entry.name)) == pid:
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):  # ended while being read
                continue
    return found


def _cmdline(pid: int) -> bytes:
    return (Path("/proc") / str(pid) / "cmdline").read_bytes()


def _thread_niceness(pid: int) -> set[int]:
    """The niceness of each thread of ``pid`` (on Linux each thread has its own); a thread that ends
    while they are read is passed over."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.add(int(_stat(task / "stat")[16]))
        except FileNotFoundError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def test_the_writers_of_several_processes_take_turns_and_a_killed_holder_lets_go(tmp_path: Path) -> None:
    """Store.share_writes: a write waits while another process holds the turn, and goes on when
    that process is killed holding it (the kernel drops its lock)."""
    import multiprocessing

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    Store.open(url).close()
    context = multiprocessing.get_context("spawn")
    holding = context.Event()
    holder = context.Process(target=_hold_the_turn, args=(url, holding), daemon=True)
    holder.start()
    try:
        assert holding.wait(60)
        store = Store.open(url, busy_timeout_ms=300)
        store.share_writes()
        from agentd._exceptions import StoreError

        # It waited its busy timeout for the turn, and says whose write held it and for how long.
        held = r"another write of this daemon held it for longer than 0.3 s \(\[database\] busy_timeout_ms\)"
        with pytest.raises(StoreError, match=held), store.write():
            pass
        os.kill(holder.pid or 0, signal.SIGKILL)
        holder.join(30)
        with store.write() as conn:  # the turn is free again
            conn.exec_driver_sql("SELECT 1")
        store.close()
    finally:
        if holder.is_alive():
            holder.kill()


def _hold_the_turn(url: str, holding: Any) -> None:
    store = Store.open(url)
    store.share_writes()
    with store.write():
        holding.set()
        time.sleep(600)


def test_log_lines_of_several_processes_on_one_stderr_stay_whole(tmp_path: Path) -> None:
    """The daemon's workers write to its stderr: each JSON line is written whole."""
    import json
    import subprocess
    import sys

    code = (
        "from agentd.config import LoggingConfig\n"
        "from agentd.observe.log import configure, get_logger\n"
        "configure(LoggingConfig(level='info', format='json'))\n"
        "log = get_logger('t')\n"
        "for i in range(3000): log.info('turn', n=i, text='x' * 300)\n"
    )
    out = tmp_path / "log"
    with out.open("w") as shared:
        procs = [subprocess.Popen([sys.executable, "-c", code], stderr=shared) for _ in range(3)]
        for p in procs:
            assert p.wait(120) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 9000
    assert all(json.loads(line)["event"] == "turn" for line in lines)


def test_a_worker_that_keeps_dying_young_is_started_again_after_growing_pauses(daemon: Any) -> None:
    """kill -9 of a worker as soon as it runs, again and again (as a worker that cannot open its
    store or load its model dies): it is started again at once after its first young death, then
    after growing pauses, said in the log; once it stays up, every message accepted meanwhile is
    answered once."""
    import json

    running = daemon()
    channels = channels_of_both_workers(4)
    accepted = post_all(running.url, channels, 2)
    for _ in range(4):
        victim = worker_pids(running.url)[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda victim=victim: restarted(running.url, victim), 60, "worker 0 to be started again")
        accepted += post_all(running.url, channels, 1)  # its channels' messages wait for it
    home = Path(running.proc.args[2])
    found = wait_answered(home, [mid for _c, mid in accepted])
    assert all(len(found[mid]) == 1 for _c, mid in accepted)
    # The three restarts after the first are of workers killed at once (young deaths); the first
    # worker may have lived long enough not to count: the pauses start at 0.5 s and double.
    log = [json.loads(line) for line in "".join(running.stderr).splitlines() if line.startswith("{")]
    pauses = [entry["seconds"] for entry in log if entry["event"] == "worker_restart_paused"]
    assert pauses[:2] == [0.5, 1.0], pauses
    assert all(entry["worker"] == 0 for entry in log if entry["event"] == "worker_restart_paused")


def test_a_worker_whose_process_cannot_be_made_is_tried_again_until_it_runs(tmp_path: Path) -> None:
    """Making a worker's process fails twice (as fork does with no processes or memory left): the
    daemon tries again after pauses, said in the log, and the third worker runs and answers."""
    import errno

    from structlog.testing import capture_logs

    from agentd.runtime.scaleout.workers import RESTART_PAUSES, Workers

    config = load_config(write_home(tmp_path, "[runtime]\nworkers = 1\n"), environ={})
    pool = Workers(config, 1, lambda _request, _event: None, lambda _index: None)
    real = pool._context
    failures = [2]

    class ForkFails:
        """The real context, whose first two processes cannot be started."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def Process(self, **kwargs: Any) -> Any:  # noqa: N802 (multiprocessing's name)
            process = real.Process(**kwargs)
            if failures[0]:
                failures[0] -= 1

                def refuse() -> None:
                    raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

                process.start = refuse
            return process

    pool._context = ForkFails()
    with capture_logs() as logged:
        try:
            pool.start()
            wait_for(lambda: pool.pids()[0] is not None, 60, "the worker to run")
            health = wait_for(lambda: pool.ask("health", 30)[0], 60, "the worker to answer")
            assert health["healthy"]
        finally:
            pool.stop(5)
    failed = [entry for entry in logged if entry["event"] == "worker_start_failed"]
    assert [entry["retry_in_seconds"] for entry in failed] == list(RESTART_PAUSES[:2])
    assert all("Resource temporarily unavailable" in entry["error"] for entry in failed)
