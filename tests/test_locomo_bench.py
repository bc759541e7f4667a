"""bench/locomo.py's logic (testkit/locomo.py) on a tiny LoCoMo-format file built here (never the real data set)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import testkit.locomo as bench
from agentd.embedders.local import LocalEmbedder
from agentd.search import SearchQuery


def _fixture(path: Path) -> Path:
    conversation = {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben! I adopted a greyhound called Pixel last week."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Congrats! Where did you find her?"},
            {
                "speaker": "Ana",
                "dia_id": "D1:3",
                "text": "At the shelter in Leeds.",
                "img_url": ["x"],
                "blip_caption": "a photo of a grey dog on a sofa",
            },
        ],
        "session_2_date_time": "10:00 am on 2 June, 2023",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "I started learning the cello on Monday."},
            {"speaker": "Ana", "dia_id": "D2:2", "text": "Lovely! Thanks!"},
            {"speaker": "Ana", "dia_id": "D2:3", "text": "Lovely! Thanks!"},
        ],
    }
    qa = [
        {"question": "What is the name of Ana's greyhound?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
        {
            "question": "When did Ben start learning the cello?",
            "answer": "May 2023",
            "evidence": ["D2:1"],
            "category": 2,
        },
        {"question": "Where did Ana adopt her dog?", "answer": "Leeds", "evidence": ["D1:1; D1:3"], "category": 1},
        {"question": "What is Ben's favourite film?", "answer": "-", "evidence": ["D2:1"], "category": 5},
        {"question": "No evidence here?", "answer": "-", "evidence": [], "category": 4},
    ]
    other = json.loads(json.dumps(conversation))
    data = [
        {"sample_id": "t-1", "conversation": conversation, "qa": qa},
        {"sample_id": "t-2", "conversation": other, "qa": qa[:1]},
    ]
    path.write_text(json.dumps(data))
    return path


def test_loading_parses_dates_captions_evidence_and_categories(tmp_path: Path) -> None:
    convs = bench.load(_fixture(tmp_path / "mini.json"))
    assert [c.sample_id for c in convs] == ["t-1", "t-2"]
    turns = convs[0].turns
    assert turns[0].date == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert turns[2].text.endswith("[shares a photo: a photo of a grey dog on a sofa]")
    # Category 5 and evidence-less questions are left out; "D1:1; D1:3" is two ids.
    assert [(q.category, q.evidence) for q in convs[0].questions] == [
        (4, ("D1:1",)),
        (2, ("D2:1",)),
        (1, ("D1:1", "D1:3")),
    ]
    assert bench.evidence_ids(["D:11:26", "D"]) == ("D11:26",)
    items = bench.memories_of(convs[0], context_turns=1)
    assert items[0].text == "Ana: Hi Ben! I adopted a greyhound called Pixel last week."
    assert items[0].metadata["dia_id"] == "D1:1"
    assert items[0].metadata["context"] == "Ben: Congrats! Where did you find her?"
    assert "context" not in bench.memories_of(convs[0], context_turns=0)[0].metadata
    # Neighbours come from the same session only.
    assert "cello" not in items[2].metadata["context"]


def test_the_bench_ingests_asks_in_every_mode_and_reports(tmp_path: Path, embedder: LocalEmbedder) -> None:
    report = bench.run(_fixture(tmp_path / "mini.json"), [1, 5], list(bench.MODES), {0}, tmp_path, embedder=embedder)
    assert "4 questions (categories 1-4 with evidence)" in report
    for section in ("## dev", "## held-out", "## all"):
        assert section in report
    rows = {
        tuple(line.split()[:2]): line.split()
        for line in report.splitlines()
        if line.split()[:1] in (["dense"], ["lexical"], ["hybrid"])
    }
    # Everything fits in five results, so recall@5 is complete in every mode.
    for mode in bench.MODES:
        assert rows[(mode, "all")][-1] == "1.000"
    # The name question is answered first by the words alone.
    assert float(rows[("lexical", "all")][3]) > 0
    assert "p50" in report
    assert "memories/s" in report


def test_identical_turns_share_a_memory_and_keep_both_ids(tmp_path: Path, embedder: LocalEmbedder) -> None:
    from agentd.config import MemoryConfig
    from agentd.memory import MemoryService
    from agentd.store import Store

    conv = bench.load(_fixture(tmp_path / "mini.json"))[0]
    store = Store.open(f"sqlite:///{tmp_path / 'b.db'}", dimension=embedder.dimension)
    try:
        service = MemoryService(store, embedder, MemoryConfig(), personas=[bench.PERSONA])
        dia = bench.ingest(service, conv, context_turns=0)
        assert ["D2:2", "D2:3"] in dia.values()
        assert sorted(d for ids in dia.values() for d in ids) == sorted(t.dia_id for t in conv.turns)
        hits = service.search(SearchQuery("greyhound Pixel", bench.reach_of(conv), limit=1, min_relevance=0.0)).hits
        assert dia[hits[0].memory.id] == ["D1:1"]
        assert hits[0].memory.created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    finally:
        store.close()


def test_the_real_path_replays_through_the_runtime_and_asks_through_a_turns_retrieval(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    report = bench.run_real(_fixture(tmp_path / "mini.json"), [1, 5], {0}, tmp_path, embedder, keep="user")
    assert "path: real" in report
    assert "2 conversations, 12 turns" in report
    for section in ("## dev (real path)", "## held-out (real path)", "## all (real path)"):
        assert section in report
    rows = {tuple(line.split()[:2]): line.split() for line in report.splitlines() if line.startswith("hybrid")}
    # Every evidence turn became an episode found within five results.
    assert rows[("hybrid", "all")][-1] == "1.000"
    # Replayed with the session dates as message times.
    from agentd.store import Store

    store = Store.open(f"sqlite:///{tmp_path / 'real' / 'real.db'}", dimension=embedder.dimension)
    try:
        with store.read() as conn:
            first = store.messages.after(conn, "locomo-t-1", 0, 1)[0]
        assert first.created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    finally:
        store.close()
