"""A memory about the user answers a question that asks something of them, and no other.

Automatic retrieval (``MemoryService.search`` without ``min_relevance``) reads what a
question asks of the person asking (agentd/search/intent.py, ``asks_of_asker``):

- a decision or advice for them ("Would a seafood paella be safe for me?"): their own
  memories compete by rank, down to ``[memory.tuning] advice_min_score``, since what constrains
  them (an allergy, a fear) rarely shares a word or a topic with the question;
- something about them ("What's my dog called?"): their memories at ``personal_min_score``;
- neither ("How do I change the row heights in a spreadsheet?"): none of their memories,
  however close a shared word puts one.

Memories of other scopes, and searches given a threshold (the admin CLI, ``recall``, the
HTTP and MCP search), are scored as before. Real SQLite store, real local embedder.
"""

from __future__ import annotations

import pytest

from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.app import App
from agentd.search import SearchQuery
from agentd.search.intent import asks_of_asker
from tests.support.fakeopenai import Turn

CAROL = Reach("buddy", "dm-carol", "carol")
FACTS = [
    "Carol is afraid of heights",
    "Carol is allergic to shellfish",
    "Carol plays the cello",
    "Carol's sister lives in Porto",
    "Carol works weekend shifts at the airport",
    "Carol has a golden retriever called Biscuit",
]


@pytest.fixture
def carol(app: App) -> App:
    for text in FACTS:
        app.memory.add("buddy", Scope.user("carol"), text)
    return app


def texts(hits) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.memory.text for h in hits]


@pytest.mark.parametrize(
    ("question", "asks"),
    [
        ("Can I eat the pork dumplings at the party?", "for"),
        ("Is a week-long cruise a good holiday idea for me?", "for"),
        ("Which wine should I order with my steak?", "for"),
        ("Can you help me choose a shirt?", "for"),
        ("Recommend a book for a long flight", "for"),
        ("Any ideas for dinner tonight?", "for"),
        ("What's my dog's name?", "about"),
        ("Where did I grow up?", "about"),
        ("Does Carol still play the cello?", "about"),
        ("How do I get to my sister's flat?", "about"),
        ("How do I save a file in Vim?", "none"),
        ("Give me a regex that matches an email address", "none"),
        ("Why is the Dead Sea so salty?", "none"),
        ("What is an ID card?", "none"),
        # An "I" that only frames the question is not a reference to the asker.
        ("I've always wondered how black holes form", "none"),
        ("I'm curious why the sky is red at sunset", "none"),
        ("I don't know if I can eat this", "about"),
    ],
)
def test_what_a_question_asks_of_the_asker_is_read_from_its_words(question: str, asks: str) -> None:
    assert asks_of_asker(question, ["carol"]) == asks


@pytest.mark.parametrize(
    "question",
    [
        "How do I change the row heights in a spreadsheet?",
        "What is port wine made from?",
        "Who wrote the cello suites?",
        "How do airports handle lost luggage?",
    ],
)
def test_a_question_that_asks_nothing_of_the_asker_recalls_none_of_their_memories(carol: App, question: str) -> None:
    assert carol.memory.search(SearchQuery(question, CAROL)).hits == ()
    # A search given a threshold (the admin's, the recall skill's) still ranks them: the memory
    # that shares the word is found first.
    found = carol.memory.search(SearchQuery(question, CAROL, min_relevance=0.0, limit=len(FACTS))).hits
    assert len(found) == len(FACTS)


def test_memories_of_other_scopes_still_answer_any_question(carol: App) -> None:
    carol.memory.add("buddy", GLOBAL, "Row heights in the team spreadsheet are locked by the admin")
    hits = carol.memory.search(SearchQuery("How do I change the row heights in a spreadsheet?", CAROL)).hits
    assert texts(hits) == ["Row heights in the team spreadsheet are locked by the admin"]


@pytest.mark.parametrize(
    ("question", "fact"),
    [
        ("Can I have the crab cakes?", "Carol is allergic to shellfish"),
        ("Should I take the cable car up the mountain?", "Carol is afraid of heights"),
    ],
)
def test_a_decision_for_the_asker_weighs_their_memories_by_rank(carol: App, question: str, fact: str) -> None:
    hits = carol.memory.search(SearchQuery(question, CAROL, limit=carol.memory.config.max_per_reply)).hits
    assert fact in texts(hits)
    # The fact that constrains the decision shares no word with it: it is recalled below the
    # threshold a topic needs, where only the personal bar lets it in.
    (hit,) = [h for h in hits if h.memory.text == fact]
    assert carol.memory.config.tuning.advice_min_score <= hit.relevance < carol.memory.config.min_score


def test_a_question_about_the_asker_keeps_a_threshold(carol: App) -> None:
    hits = carol.memory.search(SearchQuery("What's my dog's name?", CAROL)).hits
    assert texts(hits) == ["Carol has a golden retriever called Biscuit"]
    assert all(h.relevance >= carol.memory.config.tuning.personal_min_score for h in hits)


def test_a_direct_channel_over_post_v1_chat_shows_it_in_the_memory_context_event(daemons, fake_openai) -> None:  # type: ignore[no-untyped-def]
    # Not about timeouts: a worker process's first retrieval on a loaded machine can take past the 2 s default.
    d = daemons("[memory]\nretrieval_timeout_seconds = 30\n")
    for text in FACTS:
        d.app.memory.add("fake", Scope.user("carol"), text)
    fake_openai.queue(Turn(text="Grapes, mostly."), Turn(text="Better not."))
    unrelated = d.chat("What is port wine made from?", channel="dm-carol", user="carol")
    assert unrelated[0].event == "memory_context"
    assert unrelated[0].data["memories"] == []
    decision = d.chat("Can I have the crab cakes?", channel="dm-carol", user="carol")
    assert "Carol is allergic to shellfish" in [m["text"] for m in decision[0].data["memories"]]


def test_near_misses_keep_their_own_floor_when_the_asker_s_memories_compete_by_rank(carol: App) -> None:
    carol.memory.add("buddy", GLOBAL, "Seafood platters are half price on Tuesdays")  # relevance ~0.23
    result = carol.memory.search(SearchQuery("Can I have the crab cakes?", CAROL, 3, near_misses=3, near_floor=0.35))
    hits, near = result.hits, result.near_misses
    assert "Carol is allergic to shellfish" in texts(hits)
    # Shown as near misses: only what came within the margin of the threshold, never the user's
    # memories that the personal bar already weighed.
    assert all(0.35 <= h.relevance < carol.memory.config.min_score for h in near)
    assert not {h.memory.id for h in near} & {h.memory.id for h in hits}
