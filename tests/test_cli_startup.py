"""The command line as a new user meets it: commands load only what they use (no litellm unless
a model is called), `agentd init`, one-line failures for a taken port, an unusable data directory
and a locked database, and the log format."""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import click
import httpx
import pytest
import sqlean

from agentd.cli.main import COMMANDS
from tests.support.processes import isolated_env, modules_imported, run

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow

#: Imports that only some commands may pay for.
HEAVY = ("litellm", "alembic", "fastapi", "uvicorn", "onnxruntime", "numpy")


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user who has stored one memory and had one exchange with buddy (on the built-in defaults)."""
    root = tmp_path_factory.mktemp("user")
    status, out, err, _ = run(["memory", "add", "I like Python", "--persona", "buddy"], root)
    assert status == 0, err
    status, out, err, _ = run(["chat", "buddy", "--channel", "general", "--message", "hello"], root)
    assert status == 0, err
    return root


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        (["--help"], ()),
        (["--version"], ()),
        (["personas"], ()),
        (["memory", "list", "--persona", "buddy"], ()),
        (["memory", "search", "python", "--persona", "buddy"], ("onnxruntime", "numpy")),
        (["memory", "add", "I drink tea", "--persona", "buddy"], ("onnxruntime", "numpy")),
        (["memory", "forget", "1"], ()),
        (["budget", "buddy", "--channel", "general"], ("onnxruntime", "numpy")),
        (["inspect", "2"], ()),
        (["doctor"], ("onnxruntime", "numpy")),
        (["db", "upgrade"], ("alembic",)),
        (["chat", "buddy", "--channel", "general", "--message", "what do I like?"], ("onnxruntime", "numpy")),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_a_command_imports_only_what_it_uses(user: Path, args: list[str], allowed: tuple[str, ...]) -> None:
    """No command that calls no model imports litellm; a turn with the offline model does not either."""
    status, _out, err, imported = run(args, user, importtime=True)
    assert status == 0, err
    assert not (imported & set(HEAVY)) - set(allowed), sorted(imported & set(HEAVY))
    if args[0] in ("--help", "--version"):
        assert not imported & {"sqlalchemy", "numpy", "pydantic", "structlog", "rich"}, sorted(imported)


def test_memory_list_reads_rows_without_the_vector_and_logging_machinery(tmp_path: Path) -> None:
    """`agentd memory list` only reads rows: no numpy (sqlite-vec is loaded by its file), no ORM
    (the schema is Core tables), no PostgreSQL dialect, no structlog (nothing logs), no tokenizer."""
    status, _out, err, _ = run(["memory", "add", "I like Python", "--persona", "buddy"], tmp_path)
    assert status == 0, err
    code = "import sys; from agentd.cli.main import main; sys.argv[0] = 'agentd'; main()"
    cmd = [sys.executable, "-X", "importtime", "-c", code, "memory", "list", "--persona", "buddy"]
    done = subprocess.run(
        cmd, env=isolated_env(tmp_path), cwd=tmp_path / "work", capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "I like Python" in done.stdout
    modules = modules_imported(done.stderr)
    unwanted = {
        "numpy",
        "sqlite_vec",
        "sqlalchemy.orm",
        "sqlalchemy.dialects.postgresql",
        "structlog",
        "tiktoken",
        "tokenizers",
        "onnxruntime",
        "alembic",
        "litellm",
    }
    assert not modules & unwanted, sorted(modules & unwanted)
    assert "sqlalchemy" in modules  # the check sees the store's imports at all


def test_sqlite_vec_is_loaded_from_the_file_its_package_names() -> None:
    import sqlite_vec

    from agentd.store.engine import vec0_path

    assert vec0_path() == sqlite_vec.loadable_path()


@pytest.mark.parametrize(("given", "threads"), [(None, 1), ("2", 2)])
def test_numpy_runs_one_blas_thread_unless_the_user_says_otherwise(
    tmp_path: Path, given: str | None, threads: int
) -> None:
    """After the ``agentd`` entry point, numpy's OpenBLAS starts no thread of its own (it would
    spin for CPU), unless the user set OPENBLAS_NUM_THREADS: counted in /proc, not read back."""
    env = isolated_env(tmp_path)
    env.pop("OPENBLAS_NUM_THREADS", None)
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    code = (
        "import os\n"
        "import agentd.cli.main as m\n"
        "m.cli = lambda **_: None  # the entry point without a command\n"
        "m.main()\n"
        "import numpy\n"
        "print(len(os.listdir('/proc/self/task')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == threads


def test_the_help_summaries_are_the_commands_own() -> None:
    """`agentd --help` lists each command without importing it, from COMMANDS: the two must agree."""
    for name, (module, summary) in COMMANDS.items():
        command = getattr(importlib.import_module(module), name)
        assert isinstance(command, click.Command)
        assert command.get_short_help_str(limit=500) == summary, name


def test_shell_completion_lists_the_commands(tmp_path: Path) -> None:
    env = {**isolated_env(tmp_path), "_AGENTD_COMPLETE": "bash_complete", "COMP_WORDS": "agentd me", "COMP_CWORD": "1"}
    code = "from agentd.cli.main import main; main()"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["plain,memory"], done.stdout + done.stderr


def test_init_writes_a_config_and_personas_that_run(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    status, out, err, _ = run(["init", str(target)], tmp_path)
    assert status == 0, err
    assert "next: agentd --config" in out
    assert {p.name for p in (target / "personas").iterdir()} == {"buddy.toml", "researcher.toml"}
    status, out, err, _ = run(["--config", str(target / "agentd.toml"), "personas", "--json"], tmp_path)
    assert status == 0, err
    assert {p["name"] for p in json.loads(out)} == {"buddy", "researcher"}
    # Existing files are kept unless --force.
    (target / "personas" / "buddy.toml").write_text("# mine\n")
    status, _out, err, _ = run(["init", str(target)], tmp_path)
    assert status == 1
    assert "already exist" in err
    assert "--force" in err
    assert (target / "personas" / "buddy.toml").read_text() == "# mine\n"
    status, _out, err, _ = run(["init", str(target), "--force"], tmp_path)
    assert status == 0, err
    assert 'name = "buddy"' in (target / "personas" / "buddy.toml").read_text()


def _one_line_failure(status: int, err: str, *needles: str) -> None:
    """One ``error:`` line naming ``needles``. How soon it comes ("at once") is bench/startup.py's to measure."""
    assert status == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_port_in_use_is_one_line_at_once(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status, out, err, imported = run(["serve", "--port", str(port)], tmp_path, importtime=True)
    _one_line_failure(status, err, f"127.0.0.1:{port}", "address already in use", "--port")
    assert "listening" not in out
    assert not imported & {"fastapi", "uvicorn", "sqlalchemy", "onnxruntime", "litellm"}, sorted(imported)


def test_an_unusable_data_directory_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "agentd").write_text("a file where the data directory should be")
    status, _out, err, _ = run(["memory", "list", "--persona", "buddy"], tmp_path)
    _one_line_failure(status, err, "data directory", "AGENTD_HOME")


def test_a_database_locked_by_another_writer_is_one_line(user: Path) -> None:
    db = user / "home" / "agentd" / "agentd.db"
    holder = sqlean.connect(str(db), isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        args = ["memory", "add", "while locked", "--persona", "buddy"]
        status, _out, err, _ = run(args, user, env={"AGENTD_DATABASE__BUSY_TIMEOUT_MS": "300"})
    finally:
        holder.rollback()
        holder.close()
    _one_line_failure(status, err, "locked by another writer", "busy_timeout_ms")


def test_logs_are_json_lines_unless_a_person_is_watching() -> None:
    """The default format is auto: JSON when stderr is not a terminal, the console when it is."""
    from agentd.config import LoggingConfig
    from agentd.observe.log import renders_json

    with open(os.devnull, "w") as piped:
        assert renders_json(LoggingConfig(), piped)
        assert not renders_json(LoggingConfig(format="console"), piped)
    master, replica = os.openpty()
    try:
        with open(replica, "w") as tty:
            assert not renders_json(LoggingConfig(), tty)
            assert renders_json(LoggingConfig(format="json"), tty)
    finally:
        os.close(master)


def test_the_daemon_logs_json_with_an_access_line_per_request(tmp_path: Path) -> None:
    code = "import sys; from agentd.cli.main import main; sys.argv[0] = 'agentd'; main()"
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--port", "0"],  # it says which port it got
        env=isolated_env(tmp_path),
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "agentd listening on " in line, line
        with httpx.Client(base_url=line.split("listening on ")[1].split()[0], timeout=30) as client:
            assert client.get("/healthz").status_code == 200
            assert client.get("/v1/nowhere").status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is JSON
    requests = [e for e in events if e["event"] == "request"]
    assert [(r["method"], r["path"], r["status"]) for r in requests] == [
        ("GET", "/healthz", 200),
        ("GET", "/v1/nowhere", 404),
    ]
    assert all(isinstance(r["duration_ms"], float) and r["level"] == "info" and "timestamp" in r for r in requests)
