"""Shared fixtures: real SQLite files in tmp dirs, the real local embedder, a fake OpenAI server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from agentd.api import DaemonServer
from agentd.app import App
from agentd.config import Config, load_config
from agentd.embedders.local import LocalEmbedder
from tests.fakeopenai import KEY_ENV, FakeOpenAI, fake_persona
from tests.support import Running, wait_for

REPO = Path(__file__).resolve().parent.parent


def newest_migration() -> str:
    """The revision of the newest migration file (files are numbered ``NNNN_name.py``)."""
    return sorted((REPO / "migrations" / "versions").glob("[0-9]*_*.py"))[-1].name.split("_", 1)[0]


def pytest_configure(config: pytest.Config) -> None:
    """Log as the daemon does, at warning level, so test output stays readable."""
    from agentd.config import LoggingConfig
    from agentd.log import configure

    configure(LoggingConfig(level="warning", format="console"))


BUDDY = """
name = "buddy"
model = "offline"
max_tokens = 512
channels = ["general", "dm-*"]
skills = ["remember", "recall", "delegate"]
system_prompt = "You are buddy. You remember things."
"""

SCHOLAR = """
name = "scholar"
model = "offline"
max_tokens = 512
channels = ["research"]
skills = ["recall", "remember"]
system_prompt = "You are scholar. Answer briefly."
"""


def write_home(root: Path, config: str = "", personas: dict[str, str] | None = None) -> Path:
    """Write an agentd.toml and persona files under ``root``; return the config path."""
    (root / "personas").mkdir(parents=True, exist_ok=True)
    for name, text in (personas or {"buddy": BUDDY, "scholar": SCHOLAR}).items():
        (root / "personas" / f"{name}.toml").write_text(textwrap.dedent(text))
    path = root / "agentd.toml"
    base = '[database]\nurl = "sqlite:///agentd.db"\n[logging]\nlevel = "warning"\n'
    path.write_text(base + textwrap.dedent(config))
    return path


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    """The real local embedder, loaded once per test session."""
    return LocalEmbedder()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A config dir with the two test personas; returns the agentd.toml path."""
    return write_home(tmp_path)


@pytest.fixture
def config(home: Path) -> Config:
    return load_config(home, environ={})


@pytest.fixture
def app(config: Config, embedder: LocalEmbedder) -> Iterator[App]:
    """An App over a fresh SQLite file, with the shared real embedder."""
    a = App(config, embedder=embedder)
    yield a
    a.close()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


def agentd_cli(
    *args: str,
    config: Path | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``agentd`` entry point."""
    exe = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    full_env.update(env or {})
    cmd = [exe, *(["--config", str(config)] if config else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, input=input, timeout=timeout)


@pytest.fixture
def daemons(
    tmp_path: Path, fake_openai: FakeOpenAI, embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Running]]:
    """Start daemons: ``daemons(config_toml, personas={name: toml})``; all stop at the end."""
    monkeypatch.setenv(KEY_ENV, "test-key")
    started: list[Running] = []

    def start(
        config: str = "", personas: dict[str, str] | None = None, headers: dict[str, str] | None = None
    ) -> Running:
        home = write_home(tmp_path / f"home{len(started)}", config, personas or {"fake": fake_persona(fake_openai.url)})
        cfg = load_config(home, environ={})
        app = App(cfg, embedder=embedder) if cfg.embedding.provider == "local" else App(cfg)
        server = DaemonServer(app, "127.0.0.1", 0)
        thread = threading.Thread(target=server.run, name="agentd-test-server", daemon=True)
        thread.start()
        wait_for(lambda: server.started or not thread.is_alive(), 30, "the server to start")
        assert thread.is_alive(), "the server thread died at start"
        client = httpx.Client(base_url=server.url, timeout=60, headers=headers or {})
        running = Running(server, app, client, thread, home)
        started.append(running)
        return running

    yield start
    for running in started:
        running.client.close()
        running.server.request_stop()
        running.thread.join(30)
