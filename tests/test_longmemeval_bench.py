"""bench/longmemeval.py through its entry point, on a tiny LongMemEval-format file built here (never the data set)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow


def _session(*user_turns: str, answer: int | None = None) -> list[dict[str, object]]:
    turns: list[dict[str, object]] = []
    for i, text in enumerate(user_turns):
        turns.append({"role": "user", "content": text, **({"has_answer": True} if i == answer else {})})
        turns.append({"role": "assistant", "content": "Noted."})
    return turns


def _fixture(path: Path) -> Path:
    haystack = [
        _session("I bought a bread machine last week.", "It makes a loaf in three hours."),
        _session("My cat Miso knocked a vase over.", "Miso is a grey tabby, four years old.", answer=1),
        _session("We are planning a trip to Lisbon in June.", "I still need to book the flights."),
    ]
    dates = ["2023/05/01 (Mon) 10:00", "2023/05/08 (Mon) 10:00", "2023/05/15 (Mon) 10:00"]
    item = {
        "question_id": "q1",
        "question_type": "single-session-user",
        "question": "What colour is my cat?",
        "answer": "grey",
        "question_date": "2023/05/20 (Sat) 09:00",
        "haystack_session_ids": ["s1", "s2", "s3"],
        "haystack_dates": dates,
        "haystack_sessions": haystack,
        "answer_session_ids": ["s2"],
    }
    abstention = {**item, "question_id": "q2_abs", "question": "What is my dog called?"}
    path.write_text(json.dumps([item, abstention]), encoding="utf-8")
    return path


def test_the_bench_runs_from_its_entry_point_and_ends_with_the_default_figures(tmp_path: Path) -> None:
    data = _fixture(tmp_path / "lme.json")
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "longmemeval.py"), str(data), "--cache", "none", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert "1 questions with evidence (1 left out" in done.stdout
    assert [line.split("=")[0] for line in lines[-3:]] == ["recall_any@5", "recall_all@5", "ndcg_any@5"]
    # Three sessions: the evidence session is always in the top 5.
    assert lines[-3] == "recall_any@5=1.000"
    for mode in ("hybrid", "dense", "lexical"):
        assert any(line.startswith(mode) and "p50" in line for line in lines), mode


def test_a_dump_replays_to_the_benchs_own_figures(tmp_path: Path) -> None:
    """bench/fusion_replay.py re-ranks what --dump wrote with agentd's own ranking: with the weights
    the bench ran, every session metric of every mode is the bench's; other weights are taken."""
    data = _fixture(tmp_path / "lme.json")
    dump = tmp_path / "dump.json"
    bench = [sys.executable, str(REPO / "bench" / "longmemeval.py"), str(data), "--cache", "none"]
    done = subprocess.run(
        [*bench, "--dir", str(tmp_path), "--dump", str(dump)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    session = done.stdout.split("## session level")[1].split("## turn level")[0]
    ran = {line.split()[0]: line.split()[3:] for line in session.splitlines() if " all " in line}
    replay = [sys.executable, str(REPO / "bench" / "fusion_replay.py"), str(dump)]
    again = subprocess.run(replay, capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0, again.stderr
    rows = {line.split()[0]: line.split()[1:] for line in again.stdout.splitlines()[1:]}
    assert set(rows) == set(ran) == {"hybrid", "dense", "lexical"}
    for mode, values in rows.items():
        assert [v.split("=")[1] for v in values] == ran[mode], mode
    other = subprocess.run(
        [*replay, "--plain-weight", "0.5", "--one-weight"], capture_output=True, text=True, timeout=120, check=False
    )
    assert other.returncode == 0, other.stderr
    assert other.stdout.startswith("one weight for every query: ")
