"""agentd as a user installs it: the wheel built from this checkout, installed into a fresh
virtual environment, run from an empty directory with HOME in a temporary directory and no
agentd.toml anywhere — chat, memory add and search, and serve, on the built-in defaults.

No network: the wheel is built with the hatchling already installed (--no-build-isolation)
and installed with --no-deps --no-index; its dependencies come from this test run's
environment, put on the fresh environment's path by a .pth file (agentd itself is not on
that path: this checkout's editable install is a .pth in a directory that is not a site
directory there, so it is not read)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd}\n{done.stdout}\n{done.stderr}"
    return done  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; returns its bin directory."""
    root = tmp_path_factory.mktemp("install")
    dist = root / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(REPO)])
    [wheel] = dist.glob("agentd-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)])
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(site, "agentd-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


@pytest.fixture
def user(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An empty working directory and the environment of a user with an empty home."""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "XDG_"))}
    env["HOME"] = str(tmp_path / "home")
    return work, env


def test_the_installed_package_is_the_wheel_with_its_files(installed: Path, user: tuple[Path, dict[str, str]]) -> None:
    work, env = user
    code = (
        "import json, agentd, agentd.files.shipped as s, agentd.store.migrate as m;"
        "print(json.dumps([agentd.__file__, str(s.example_config()), str(s.example_personas()),"
        " str(m.migrations_dir())]))"
    )
    paths = json.loads(_run([str(installed / "python"), "-c", code], cwd=work, env=env).stdout)
    venv = str(installed.parent)
    assert all(p.startswith(venv) for p in paths), paths
    assert paths[1].endswith("agentd/_shipped/agentd.toml")
    assert paths[3].endswith("agentd/_migrations")
    # Typed (PEP 561), licensed, and versioned as the package says.
    code = (
        "import json, pathlib, importlib.metadata as md, agentd;"
        "d = md.distribution('agentd');"
        "print(json.dumps([(pathlib.Path(agentd.__file__).parent / 'py.typed').is_file(), d.version,"
        " agentd.__version__, d.metadata['License-Expression'], [str(f) for f in d.files if 'LICENSE' in str(f)]]))"
    )
    typed, version, own, license_, files = json.loads(
        _run([str(installed / "python"), "-c", code], cwd=work, env=env).stdout
    )
    assert typed
    assert version == own
    assert license_ == "Apache-2.0"
    assert any(f.endswith("licenses/LICENSE") for f in files), files


def test_chat_and_memory_run_from_an_empty_directory(installed: Path, user: tuple[Path, dict[str, str]]) -> None:
    work, env = user
    agentd = str(installed / "agentd")
    said = _run([agentd, "chat", "buddy", "--message", "remember that I like Python"], cwd=work, env=env)
    assert "I will remember" in said.stdout
    _run([agentd, "memory", "add", "User's favorite color is blue", "--persona", "buddy"], cwd=work, env=env)
    found = _run(
        [agentd, "memory", "search", "what colour do I like?", "--persona", "buddy", "--json"], cwd=work, env=env
    )
    assert json.loads(found.stdout)["results"][0]["text"] == "User's favorite color is blue"
    # The data went to the platform's user data directory, nothing to the working directory.
    assert (Path(env["HOME"]) / ".local" / "share" / "agentd" / "agentd.db").is_file()
    assert list(work.iterdir()) == []


def test_serve_runs_from_an_empty_directory(installed: Path, user: tuple[Path, dict[str, str]]) -> None:
    work, env = user
    proc = subprocess.Popen(
        [str(installed / "agentd"), "serve", "--port", "0"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "agentd listening on " in line, line + (proc.stderr.read() if proc.stderr else "")
        url = line.split("listening on ")[1].split()[0]
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.get("/healthz").status_code == 200
            body = {"persona": "buddy", "channel": "general", "user": "ann", "message": "hello"}
            with client.stream("POST", "/v1/chat", json=body) as response:
                assert response.status_code == 200
                text = "".join(response.iter_text())
            assert "event: done" in text, text
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:  # it did not stop (the test fails on the timeout): not left running
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 0, err
