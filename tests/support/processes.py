"""Processes the tests start and watch: a command with its output in a log file, whether a port
listens, and the ``agentd`` command run from an empty directory with the imports it made."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.support import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Process:
    """A subprocess whose output goes to a file (read on failure)."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args, self.log, self.env = args, log, env
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


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
