"""Recall people can trust, through the one search function and its callers.

- the contracts: ``recall`` and the memory service (search, context) give
  the top ``limit`` by score with no threshold unless one is asked for; automatic
  retrieval keeps its threshold of 0.5;
- what a query asks decides what is recalled: nothing for greetings and thanks, the
  user's own memories for questions about the user, their preferences for advice;
- a memory without content ("a") is never recalled by chance.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.app import App
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from agentd.search import SearchQuery
from agentd.search.intent import analyse, has_content
from agentd.skills import RecallSkill, SkillCaller
from tests.conftest import agentd_cli, write_home

ALICE = Reach("buddy", "general", "alice")
PYTHON_PRACTICE = [f"User practised Python programming exercise number {i}" for i in range(7)]


def texts(hits) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.memory.text for h in hits]


def recall(app: App, arguments: dict[str, object], user: str = "alice") -> dict[str, object]:
    return RecallSkill(app.memory).run(arguments, SkillCaller("buddy", "general", user))


# -- the contracts ---------------------------------------------------------------------------------------------


def test_recall_returns_the_top_limit_by_score_with_no_threshold(app: App) -> None:
    for text in PYTHON_PRACTICE:
        app.memory.add("buddy", GLOBAL, text)
    app.memory.add("buddy", GLOBAL, "The office plants are watered on Mondays")
    # Automatic retrieval's threshold would keep only the strong matches; recall has none.
    above = app.memory.search(SearchQuery("Python programming practice", ALICE, limit=10)).hits
    result = recall(app, {"query": "Python programming practice", "limit": 10})
    assert result["total_found"] == 8 > len(above)
    results = result["results"]
    assert isinstance(results, list)
    assert {r["text"] for r in results[:7]} == set(PYTHON_PRACTICE)
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert len(recall(app, {"query": "Python programming practice"})["results"]) == 5  # type: ignore[arg-type]


def test_recall_results_have_the_seeds_fields_and_whole_second_timestamps(app: App) -> None:
    app.memory.add(
        "buddy",
        GLOBAL,
        "User's favorite color is blue",
        "preference",
        created_at=datetime(2025, 1, 15, 10, 30, 0, 123456, UTC),
    )
    (item,) = recall(app, {"query": "favourite colour"})["results"]  # type: ignore[misc]
    assert set(item) == {"text", "category", "score", "created_at"}
    assert item["created_at"] == "2025-01-15T10:30:00Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", item["created_at"])


def test_recall_min_score_in_config_sets_a_threshold(tmp_path: Path, embedder: LocalEmbedder) -> None:
    home = write_home(tmp_path, "[memory]\nsearch_min_score = 0.5\n")
    app = App(load_config(home, environ={}), embedder=embedder)
    try:
        for text in PYTHON_PRACTICE:
            app.memory.add("buddy", GLOBAL, text)
        app.memory.add("buddy", GLOBAL, "The office plants are watered on Mondays")
        result = recall(app, {"query": "Python programming practice", "limit": 10})
        assert "The office plants are watered on Mondays" not in {r["text"] for r in result["results"]}  # type: ignore[attr-defined]
    finally:
        app.close()


def test_automatic_retrieval_keeps_the_default_relevance_threshold(app: App) -> None:
    app.memory.add("buddy", GLOBAL, "User likes Python", "preference")
    app.memory.add("buddy", GLOBAL, "User's dog is named Max")
    assert texts(app.memory.search(SearchQuery("What programming language should I learn?", ALICE)).hits) == [
        "User likes Python"
    ]
    assert app.memory.search(SearchQuery("Explain quantum entanglement", ALICE)).hits == ()
    # With no threshold both come back, weakest last.
    assert texts(app.memory.search(SearchQuery("Explain quantum entanglement", ALICE, min_relevance=0.0)).hits) != []


def test_search_and_context_have_no_threshold_unless_min_score_is_given(daemons) -> None:  # type: ignore[no-untyped-def]
    d = daemons()
    for text in PYTHON_PRACTICE:
        d.app.memory.add("fake", Scope.user("erin"), text)
    d.app.memory.add("fake", Scope.user("erin"), "Erin waters the office plants on Mondays")
    query = {"userId": "erin", "query": "Python programming practice"}
    searched = d.client.post("/v1/memory/search", json=query).json()
    assert searched["total_found"] == 8
    context = d.client.post("/v1/memory/context", json=query).json()
    assert context["memoriesUsed"] == 8
    assert "office plants" in context["context"]
    strict = d.client.post("/v1/memory/search", json={**query, "minScore": 0.5}).json()
    assert 0 < strict["total_found"] < 8
    assert all(r["relevance"] >= 0.5 for r in strict["results"])
    strict_context = d.client.post("/v1/memory/context", json={**query, "minScore": 0.5}).json()
    assert strict_context["memoriesUsed"] == strict["total_found"]


# -- what the query asks ------------------------------------------------------------------------------------------

ALICE_MEMORIES = [
    ("Works as a paediatric nurse on night shifts", "profile"),
    ("User said: I like Python", "preference"),
    ("Has a cat named Miso", "fact"),
]


@pytest.fixture
def people(app: App) -> App:
    for text, category in ALICE_MEMORIES:
        app.memory.add("buddy", Scope.user("alice"), text, category)
    app.memory.add("buddy", Scope.user("bob"), "Bob loves sailing", "preference")
    app.memory.add("buddy", GLOBAL, "The team standup is at 9:30 every weekday")
    app.memory.add("buddy", Scope.user("alice"), "a")
    return app


@pytest.mark.parametrize(
    "query",
    [
        "What do you know about me?",
        "what do you remember about me?",
        "Remind me what I told you",
        "Tell me about myself",
        "Who am I?",
        "What have I shared with you so far?",
    ],
)
def test_questions_about_the_user_recall_that_users_memories(people: App, query: str) -> None:
    found = people.memory.search(SearchQuery(query, ALICE, limit=10)).hits
    assert sorted(texts(found)) == sorted(t for t, _ in ALICE_MEMORIES)
    assert all(h.relevance >= people.config.memory.min_score for h in found)
    # Newest first, and never another user's or a persona-wide memory.
    assert texts(found)[0] == ALICE_MEMORIES[-1][0]
    assert texts(people.memory.search(SearchQuery(query, Reach("buddy", "general", "bob"))).hits) == [
        "Bob loves sailing"
    ]
    assert people.memory.search(SearchQuery(query, Reach("buddy", "general", None))).hits == ()


@pytest.mark.parametrize("query", ["What are my preferences?", "what do I like?", "what should I learn?"])
def test_questions_about_tastes_and_advice_recall_the_users_preferences(people: App, query: str) -> None:
    assert texts(people.memory.search(SearchQuery(query, ALICE)).hits) == ["User said: I like Python"]


@pytest.mark.parametrize(
    "query",
    ["hello", "ok thanks!", "lol", "Good morning!", "thank you so much", "👍", "hey buddy", "and the second one?"],
)
def test_greetings_thanks_and_content_free_messages_recall_nothing(people: App, query: str) -> None:
    assert people.memory.search(SearchQuery(query, ALICE)).hits == ()
    assert people.memory.search(SearchQuery(query, ALICE, min_relevance=0.0)).hits == ()  # not even without a threshold
    assert recall(people, {"query": query})["results"] == []


def test_a_memory_without_content_is_never_recalled_by_chance(people: App) -> None:
    for query in [
        "Explain quantum entanglement",
        "What is the capital of Australia?",
        "a",
        "What do you know about me?",
    ]:
        assert "a" not in texts(people.memory.search(SearchQuery(query, ALICE, limit=50, min_relevance=0.0)).hits)
    assert not has_content("a")
    assert not has_content("ok")
    assert not has_content("?!")
    assert has_content("42")


def test_topic_questions_still_search_by_topic(people: App) -> None:
    assert (
        texts(people.memory.search(SearchQuery("Where do I work?", ALICE)).hits)[0]
        == "Works as a paediatric nurse on night shifts"
    )
    assert texts(people.memory.search(SearchQuery("What's my cat called?", ALICE)).hits)[0] == "Has a cat named Miso"
    assert texts(people.memory.search(SearchQuery("When is the daily standup?", ALICE)).hits) == [
        "The team standup is at 9:30 every weekday"
    ]


def test_the_intent_of_a_query_is_read_from_its_words() -> None:
    assert analyse("hello buddy", names=["buddy"]).kind == "none"
    assert analyse("tell me more").kind == "none"
    assert analyse("I'm doing well, how about you?").kind == "none"
    assert analyse("What do you know about me?").facet == "all"
    assert analyse("what should I do?").facet == "preferences"
    assert analyse("What did Caroline say about the adoption?").topic == ("caroline", "adoption")
    assert analyse("What do you know about my job?").kind == "topic"


@pytest.mark.slow
def test_the_quick_start_recalls_what_was_remembered(tmp_path: Path) -> None:
    """README's quick start: remember "I like Python", then ask what to learn."""
    config = write_home(tmp_path, "")
    said = agentd_cli("chat", "buddy", "--user", "dana", "--message", "remember that I like Python", config=config)
    assert said.returncode == 0, said.stderr
    shown = agentd_cli(
        "budget", "buddy", "--channel", "general", "--user", "dana", "--message", "what should I learn?", config=config
    )
    assert shown.returncode == 0, shown.stderr
    assert "User said: I like Python" in shown.stdout
    greeted = agentd_cli(
        "budget", "buddy", "--channel", "general", "--user", "dana", "--message", "hello", "--json", config=config
    )
    assert '"memories_included": 0' in greeted.stdout
