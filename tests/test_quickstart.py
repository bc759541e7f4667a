"""The README's Quick start (and the docs site's getting-started page, when there is one) as a
newcomer runs it: every ``agentd`` command of its shell blocks, in order, in new processes, from
a clean directory holding what a fresh clone holds (``agentd.toml`` and ``personas/``), with an
empty data directory.

The commands are read out of the pages, so the test follows them as they change. A command's
comment says what it produces: every double-quoted string in it (``# finds "User said: I like
Python"``) must appear in what the command prints, and every command must succeed. ``agentd
serve`` starts the daemon in the background (on a free port; the commands after it reach it
through ``$AGENTD_URL``, as ``agentd post --help`` says); installs and test runs are what
tests/test_install.py and the test run itself cover, and are skipped here."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow

AGENTD = str(Path(sys.executable).parent / "agentd")
#: Pages whose shell blocks are the newcomer's first steps: the README's Quick start section, and
#: the docs site's getting-started page (every block) when it exists.
PAGES = (("README.md", "## Quick start"), ("docs/getting-started.md", None))
#: An argument that is a placeholder for the reader to fill in (DIR, FILE.jsonl): not runnable as is.
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]+(\.\w+)?$")


@dataclass(frozen=True)
class Step:
    """One ``agentd`` command of a page, and the strings its comment says it prints."""

    page: str
    argv: tuple[str, ...]
    expected: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page}: agentd {shlex.join(self.argv)}"


def split_comment(line: str) -> tuple[str, str]:
    """A shell line's command and its ``#`` comment (a ``#`` inside quotes is not one)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i + 1 :]
    return line, ""


def section(text: str, heading: str | None) -> str:
    """The part of ``text`` under ``heading`` (up to the next heading of the same level), or all of it."""
    if heading is None:
        return text
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ", 1)[0]
    end = text.find(f"\n{level} ", start + 1)
    return text[start : end if end != -1 else None]


def steps_of(page: str, text: str) -> Iterator[Step]:
    """The ``agentd`` commands of the page's ``sh`` blocks, in order."""
    for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            command, comment = split_comment(line.removeprefix("$ ").strip())
            for part in re.split(r"\s*&&\s*", command.strip()):
                words = shlex.split(part) if part else []
                if not words or Path(words[0]).name != "agentd":
                    continue  # installs (python3 -m venv, pip), the test run
                if any(PLACEHOLDER.match(w) for w in words[1:]):
                    continue
                yield Step(page, tuple(words[1:]), tuple(re.findall(r'"([^"]+)"', comment)))


def page_steps(name: str, heading: str | None) -> list[Step]:
    """The steps of one page (none when the page does not exist)."""
    path = REPO / name
    if not path.is_file():
        return []
    return list(steps_of(name, section(path.read_text(encoding="utf-8"), heading)))


def all_steps() -> list[Step]:
    return [step for name, heading in PAGES for step in page_steps(name, heading)]


def test_the_pages_have_steps() -> None:
    """The reader of this test can see what it runs (and it runs something)."""
    steps = all_steps()
    assert any(s.argv[:1] == ("serve",) for s in steps), steps
    assert sum(s.argv[:1] == ("chat",) for s in steps) >= 2, steps
    commented = split_comment('agentd chat buddy -m "a # b"   # says "x" (not "a # b")')
    assert commented == ('agentd chat buddy -m "a # b"   ', ' says "x" (not "a # b")')


@pytest.mark.parametrize(("name", "heading"), PAGES, ids=[name for name, _ in PAGES])
def test_the_quick_start_runs_in_order_from_a_clean_clone(tmp_path: Path, name: str, heading: str | None) -> None:
    """Each page is a newcomer's own first session: its steps, in order, in a clean directory."""
    steps = page_steps(name, heading)
    if not steps:
        pytest.skip(f"{name} does not exist")
    work = tmp_path / "clone"
    work.mkdir()
    shutil.copy(REPO / "agentd.toml", work / "agentd.toml")
    shutil.copytree(REPO / "personas", work / "personas")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    # An empty data directory; the daemon on a free port, answering in its own process (worker
    # processes would cost this busy test machine seconds of CPU and test nothing more here).
    env.update(AGENTD_HOME=str(tmp_path / "data"), AGENTD_RUNTIME__WORKERS="0", HOME=str(tmp_path))
    daemon: subprocess.Popen[str] | None = None
    try:
        for step in steps:
            if step.argv[:1] == ("serve",):
                assert daemon is None, "two daemons in one Quick start"
                daemon = subprocess.Popen(
                    [AGENTD, *step.argv],
                    cwd=work,
                    env={**env, "AGENTD_DAEMON__PORT": "0"},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
                assert daemon.stdout is not None
                line = daemon.stdout.readline()  # the start line, once the daemon answers
                assert "agentd listening on " in line, (step, line)
                assert f"config: {work / 'agentd.toml'}" in line, line
                env["AGENTD_URL"] = line.split("listening on ")[1].split()[0]
                continue
            ran = subprocess.run([AGENTD, *step.argv], cwd=work, env=env, capture_output=True, text=True, timeout=120)
            printed = ran.stdout + ran.stderr
            assert ran.returncode == 0, f"{step} exited {ran.returncode}:\n{printed}"
            for expected in step.expected:
                assert expected in printed, f"{step} did not print {expected!r}:\n{printed}"
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            try:
                assert daemon.wait(60) == 0
            finally:
                if daemon.poll() is None:
                    daemon.kill()
                if daemon.stdout is not None:
                    daemon.stdout.close()
    # agentd doctor, from the same directory, names the same config file as serve's first line.
    doctor = subprocess.run(
        [AGENTD, "doctor", "--json"], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    checks = {c["check"]: c["detail"] for c in json.loads(doctor.stdout)}
    assert checks["config"] == str(work / "agentd.toml"), doctor.stdout + doctor.stderr
    # Nothing was written to the clean directory itself but what `agentd init DIR` was asked to write:
    # the data went to the data directory.
    made = {step.argv[1] for step in steps if step.argv[:1] == ("init",) and len(step.argv) > 1}
    assert sorted(p.name for p in work.iterdir()) == sorted({"agentd.toml", "personas", *made})
