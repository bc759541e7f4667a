"""``agentd serve`` as installed, in a subprocess: what the tests of signals, worker processes,
clusters and tracing run (the in-process daemon is conftest's ``daemons``)."""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.support import REPO
from tests.support.fakeopenai import KEY_ENV


class Serve:
    """``agentd serve --port 0`` in a subprocess; ``url`` once it printed where it listens."""

    def __init__(self, home: Path, new_session: bool = False, cwd: Path = REPO) -> None:
        """``new_session``: in a process group of its own (signalled as a whole with ``os.killpg``);
        ``cwd``: the directory it runs in."""
        exe = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
        env[KEY_ENV] = "test-key"
        self.proc = subprocess.Popen(
            [exe, "--config", str(home), "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=new_session,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        line = self.lines.get(timeout=120)  # worker processes start first
        assert "agentd listening on " in line, (line, self.stderr)
        self.url = line.split("listening on ")[1].split()[0]

    @staticmethod
    def _pump(stream: Any, put: Any) -> None:
        for line in stream:
            put(line)

    def stop(self) -> None:
        """SIGKILL (the crash a test wants) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def terminate(self, grace: float = 60) -> None:
        """SIGTERM, as an operator stops it (it drains), then SIGKILL past ``grace`` seconds."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.stop()
