"""Who a memory is about: a user's memory is recalled for their questions however it names them,
and age orders strong matches only as far as their evidence allows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.app import App
from agentd.embedders.calibration import Calibration
from agentd.search import SearchQuery
from agentd.search.fusion import Evidence, Fusion
from agentd.search.ranking import Ranker
from agentd.search.recency import Recency
from agentd.search.subjects import indexed_text, names_of

QUESTION = "What programming language should I learn?"


def test_names_come_from_the_user_id() -> None:
    assert names_of("carol") == ("carol",)
    assert names_of("priya.nair") == ("priya nair", "priya")
    assert names_of("libera:bob_smith") == ("bob smith", "bob")
    assert names_of("1234") == ()


@pytest.mark.parametrize(
    ("text", "indexed"),
    [
        ("Carol likes Python", "likes Python"),
        ("carol's brother lives in Leeds", "brother lives in Leeds"),
        ("User is allergic to peanuts", "User is allergic to peanuts"),  # already read as the asker
        ("I'm learning Rust", "learning Rust"),
        ("My partner is called Sam", "partner is called Sam"),
        ("Likes Python", "Likes Python"),
        ("Caroline likes Go", "Caroline likes Go"),  # another name: not the user
        ("Island holidays are her favourite", "Island holidays are her favourite"),
        ("Carol", "Carol"),  # nothing would be left
    ],
)
def test_a_users_memory_is_embedded_without_the_subject_that_names_them(text: str, indexed: str) -> None:
    assert indexed_text(text, Scope.user("carol")) == indexed
    # Elsewhere, whom a memory is about is not known: it is embedded as written.
    assert indexed_text(text, GLOBAL) == text


def test_carol_asking_recalls_the_memory_that_names_her(app: App) -> None:
    """The first-use question ("What programming language should I learn?"), asked by carol in her
    direct channel, recalls "Carol likes Python" at the default threshold, as it recalls "Likes
    Python"; bob, with the same memory in his scope, gets it as his own, while "Carol likes Python"
    in bob's scope is about someone else."""
    app.memory.add("buddy", Scope.user("carol"), "Carol likes Python")
    app.memory.add("buddy", Scope.user("dave"), "Likes Python")
    app.memory.add("buddy", Scope.user("bob"), "Carol likes Python")
    (carol,) = app.memory.search(SearchQuery(QUESTION, Reach("buddy", "dm-carol", "carol"))).hits
    (dave,) = app.memory.search(SearchQuery(QUESTION, Reach("buddy", "dm-dave", "dave"))).hits
    assert carol.memory.text == "Carol likes Python"
    assert carol.relevance >= 0.5
    assert carol.relevance == pytest.approx(dave.relevance, abs=0.05)
    bob = app.memory.search(SearchQuery(QUESTION, Reach("buddy", "dm-bob", "bob"), min_relevance=0.0)).hits
    assert bob[0].relevance < carol.relevance


def test_age_never_puts_a_weaker_match_above_a_stronger_one_when_both_match_strongly() -> None:
    now = datetime(2024, 6, 1, tzinfo=UTC)
    calibration, recency = Calibration(0.785, 0.013), Recency(30.0, 0.2)
    candidates = {1: Evidence(0.90), 2: Evidence(0.86)}
    created = {1: now - timedelta(days=300), 2: now}
    ranker = Ranker(calibration, recency, Fusion())
    ranked = ranker.rank(candidates, created, now, min_relevance=0.0)
    assert [r.id for r in ranked] == [1, 2]
    # A middling match still loses to an equal fresh one, by about what age takes.
    middling = {1: Evidence(0.785), 2: Evidence(0.785)}
    old, new = sorted(ranker.rank(middling, created, now, min_relevance=0.0), key=lambda r: r.id)
    assert new.score > old.score >= 0.8 * old.relevance
