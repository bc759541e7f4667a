"""Processes the tests start and watch: a command with its output in a log file, whether a port
listens, and the ``agentd`` command run from an empty directory with the imports it made."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support import REPO, wait_for

#: Starts of a server that cannot take port 0, each on a port free a moment before, before giving up.
PORT_ATTEMPTS = 5


def free_port() -> int:
    """A loopback port no one listens on now. Only for a server that cannot be told to listen on port 0
    (ngircd, Synapse, PostgreSQL): another process may take it before the server binds it, so start such a
    server with :func:`start_on_a_free_port`, which tries again on another port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_on_a_free_port(
    start: Callable[[int], Process], ready: Callable[[int, Process], bool], what: str, timeout: float = 60
) -> tuple[int, Process]:
    """Start a server that cannot take port 0 (``start(port)``) on a :func:`free_port`, wait until
    ``ready(port, process)``; if the process exits first (another process took the port between our check
    and its bind: the race a port-0 server does not have), start it again on a fresh port, up to
    :data:`PORT_ATTEMPTS` times. Returns the port and the running process."""
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        process = start(port)
        wait_for(lambda p=port, s=process: ready(p, s) or not s.running(), timeout, f"{what} to listen")
        if process.running():
            return port, process
        process.stop()
    raise AssertionError(f"{what} exited at start {PORT_ATTEMPTS} times:\n{process.tail()}")


class Process:
    """A subprocess whose output goes to a file (read on failure)."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args, self.log, self.env = args, log, env
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)

    def running(self) -> bool:
        """Whether the process has started and not exited."""
        return self.proc is not None and self.proc.poll() is None

    def tail(self, size: int = 3000) -> str:
        """The end of its log."""
        return self.log.read_text(errors="replace")[-size:] if self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def serve_url(process: Process, timeout: float = 60) -> str:
    """The URL ``agentd serve --port 0`` (run as ``process``) printed it listens on, once it has."""

    def printed() -> str | None:
        assert process.running(), f"agentd serve exited at start:\n{process.tail()}"
        found = re.search(r"agentd listening on (\S+)", process.log.read_text(errors="replace"))
        return found.group(1) if found else None

    return str(wait_for(printed, timeout, "agentd serve to say where it listens"))


def serve_on_port_0(args: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[str, Process]:
    """``agentd ... serve`` (``args``) on port 0: its URL and process. A restart (``process.start()``)
    listens on the port it got, so that what was told its URL finds it again."""
    process = Process([*args, "--port", "0"], log, env)
    url = serve_url(process)
    process.args[-1] = url.rsplit(":", 1)[1].rstrip("/")
    return url, process


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def isolated_env(root: Path) -> dict[str, str]:
    """A user with nothing of agentd's yet: HOME and AGENTD_HOME in ``root``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "XDG_"))}
    env.update({"HOME": str(root / "home"), "AGENTD_HOME": str(root / "home" / "agentd")})
    return env


def run(
    args: list[str], root: Path, *, importtime: bool = False, env: dict[str, str] | None = None
) -> tuple[int, str, str, set[str]]:
    """``agentd ARGS`` from an empty directory; (status, stdout, stderr, top-level packages imported)."""
    work = root / "work"
    work.mkdir(exist_ok=True)
    code = "import sys; from agentd.cli.main import main; sys.argv[0] = 'agentd'; main()"
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-c", code, *args]
    full_env = {**isolated_env(root), **(env or {})}
    done = subprocess.run(cmd, env=full_env, cwd=work, capture_output=True, text=True, timeout=120)
    imported = {name.split(".")[0] for name in modules_imported(done.stderr)}
    stderr = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("import time:"))
    return done.returncode, done.stdout, stderr, imported


def modules_imported(importtime_stderr: str) -> set[str]:
    """Every module ``python -X importtime`` reported, by its full name."""
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in importtime_stderr.splitlines()
        if line.startswith("import time:") and not line.endswith("imported package")
    }
