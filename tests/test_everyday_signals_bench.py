"""bench/everyday_signals.py through its entry point, on a tiny everyday-format set built here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow

STYLES = ["name", "subjectless"]


def _fact(key: str, held_text: str, questions: list[str]) -> dict[str, object]:
    return {
        "key": key,
        "kind": "direct",
        "name": "{Name} " + held_text,
        "subjectless": held_text.capitalize(),
        "questions": questions,
    }


def _set(path: Path) -> Path:
    facts = [
        _fact("cello", "plays the cello", ["What instrument do I play?"]),
        _fact("porto", "has a sister in Porto", ["Where does my sister live?"]),
        _fact("bees", "keeps bees", ["What do I keep in the garden?"]),
    ]
    data = {
        "about": "a tiny set for the test",
        "persona": "p",
        "users": [{"id": "ana", "name": "Ana"}],
        "styles": STYLES,
        "facts": facts,
        "unrelated": ["What is the capital of Peru?", "How do magnets work?"],
        "traps": ["Who wrote the cello suites?"],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_it_prints_each_signals_separation_for_dev_and_held_out(tmp_path: Path) -> None:
    generic = tmp_path / "generic.txt"
    generic.write_text("How do I boil an egg?\nWhat is the tallest mountain?\n" * 6, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "everyday_signals.py"),
            "--set",
            str(_set(tmp_path / "set.json")),
            "--hub-weights",
            "0.5",
            "--generic",
            str(generic),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "## dev"
    rows = [line.split() for line in lines if line.startswith(("dense", "hub"))]
    # dev rows only: with three facts and three silent questions, nothing is held out.
    assert [r[0] for r in rows] == ["dense", "hub"]
    for row in rows:
        figures = [float(x) for x in row[-5:]]
        assert all(0.0 <= x <= 1.0 for x in figures), row
