"""Hybrid memory search: words (FTS5 bm25) fused with vectors behind MemoryService.search."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime
from typing import Any

import pytest

from agentd import InvalidInput
from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.app import App
from agentd.config import MemoryConfig, MemoryTuning
from agentd.embedders.calibration import WordWeights
from agentd.search import SearchQuery
from agentd.search.dates import query_dates
from agentd.search.engine import with_mode
from agentd.search.fusion import Fusion
from agentd.search.query import counts, named_words

pytestmark = pytest.mark.both_backends

BUDDY = Reach("buddy")

TRIPS = {
    "14 March": "Priya flies to Lisbon on 14 March for the design offsite",
    "2 April": "Dmitri flies to Lisbon on 2 April for the sales kickoff",
    "27 May": "Lena flies to Lisbon on 27 May for a friend's wedding",
    "9 June": "Ming flies to Lisbon on 9 June for the security conference",
    "30 July": "Carol flies to Lisbon on 30 July to visit her sister",
    "12 September": "Bob flies to Lisbon on 12 September for a product launch",
}


STANDUPS = [
    date(2023, 3, 14),
    date(2023, 4, 2),
    date(2023, 5, 27),
    date(2023, 6, 9),
    date(2023, 7, 30),
    date(2023, 9, 12),
]


def test_hybrid_finds_names_and_dates_that_embeddings_blur(app: App) -> None:
    """Near-identical memories that differ in a name and a date, or only in the day they were written.

    The default embedder (e5-small-v2) already tells the trips apart by their words;
    hybrid must keep that. The standup notes differ only in their creation day, which
    no embedding sees: only hybrid search, through the day the query names, finds
    the asked one first.
    """
    for text in TRIPS.values():
        app.memory.add("buddy", GLOBAL, text)
    for i, day in enumerate(STANDUPS):
        app.memory.add(
            "buddy",
            GLOBAL,
            f"Standup notes #{i + 1}: the release slipped again because of flaky tests",
            created_at=datetime(day.year, day.month, day.day, 9, 30, tzinfo=UTC),
        )
    queries = [(f"Who travels on {date}?", text) for date, text in TRIPS.items()]
    queries += [(f"When is {text.split()[0]}'s trip to Lisbon?", text) for text in TRIPS.values()]
    standups = [
        (f"Why did the release slip, as said at standup on {d.day} {d:%B}, {d.year}?", f"Standup notes #{i + 1}")
        for i, d in enumerate(STANDUPS)
    ]

    def top1(query: str, mode: str) -> str:
        return (
            with_mode(app.memory.searcher, mode)
            .search(SearchQuery(query, BUDDY, limit=1, min_relevance=0.0))
            .hits[0]
            .memory.text
        )  # type: ignore[arg-type]

    assert [top1(q, "hybrid") for q, _ in queries] == [want for _, want in queries]
    assert all(top1(q, "hybrid").startswith(want + ":") for q, want in standups)
    assert sum(top1(q, "dense").startswith(want + ":") for q, want in standups) < len(standups)


def test_a_word_match_raises_relevance_and_no_shared_word_changes_nothing(app: App) -> None:
    app.memory.add("buddy", GLOBAL, "The staging database runs on host tarragon-7")
    app.memory.add("buddy", GLOBAL, "User likes Python")
    [dense] = (
        with_mode(app.memory.searcher, "dense")
        .search(SearchQuery("Which machine is tarragon-7?", BUDDY, limit=1, min_relevance=0.0))
        .hits
    )
    [hybrid] = app.memory.search(SearchQuery("Which machine is tarragon-7?", BUDDY, limit=1, min_relevance=0.0)).hits
    assert hybrid.memory.id == dense.memory.id
    assert hybrid.bm25 > 0
    assert hybrid.relevance > dense.relevance
    # No query word in the memory: the fused relevance is the dense one.
    [d2] = (
        with_mode(app.memory.searcher, "dense")
        .search(SearchQuery("What programming language should I learn?", BUDDY, limit=1, min_relevance=0.0))
        .hits
    )
    [h2] = app.memory.search(
        SearchQuery("What programming language should I learn?", BUDDY, limit=1, min_relevance=0.0)
    ).hits
    assert h2.memory.text == "User likes Python"
    assert h2.bm25 == 0
    assert h2.relevance == pytest.approx(d2.relevance)


def test_the_first_use_cases_hold_with_the_default_hybrid_search(app: App) -> None:
    """The first-use cases: "User likes Python" is found above the default threshold; an unrelated
    memory is not, even when a common word is shared."""
    app.memory.add("buddy", GLOBAL, "User likes Python", "preference")
    app.memory.add("buddy", GLOBAL, "User's dog is named Max")
    assert [
        h.memory.text for h in app.memory.search(SearchQuery("What programming language should I learn?", BUDDY)).hits
    ] == ["User likes Python"]
    assert app.memory.search(SearchQuery("Explain quantum entanglement", BUDDY)).hits == ()
    assert app.memory.search(SearchQuery("What does the user know about quantum entanglement?", BUDDY)).hits == ()


def test_the_word_index_keeps_scopes_and_personas_apart(app: App) -> None:
    m = app.memory
    m.add("buddy", Scope.channel("a"), "The vault code word is zanzibar")
    m.add("buddy", Scope.user("x"), "User x keeps a zanzibar notebook")
    m.add("scholar", GLOBAL, "Scholar studies zanzibar spice routes")

    def found(reach: Reach, mode: str) -> set[str]:
        return {
            h.memory.text
            for h in with_mode(m.searcher, mode)
            .search(SearchQuery("zanzibar", reach, limit=20, min_relevance=0.0))
            .hits
        }  # type: ignore[arg-type]

    for mode in ("lexical", "hybrid"):
        assert found(Reach("buddy", channel="b"), mode) == set()
        assert found(Reach("buddy", channel="b", user="y"), mode) == set()
        assert found(Reach("buddy", channel="a"), mode) == {"The vault code word is zanzibar"}
        assert found(Reach("buddy", user="x"), mode) == {"User x keeps a zanzibar notebook"}
        assert found(Reach("scholar"), mode) == {"Scholar studies zanzibar spice routes"}
        assert len(found(Reach("buddy", everywhere=True), mode)) == 2


def test_metadata_context_is_searchable_but_never_shown(app: App) -> None:
    """A turn that says only "In Reykjavik!" is found by the question asked just before it."""
    memory, _ = app.memory.add(
        "buddy",
        GLOBAL,
        "Maria: In Reykjavik, at the harbour!",
        metadata={"context": "John: Where did you propose to your partner?"},
    )
    app.memory.add("buddy", GLOBAL, "John: I painted the fence blue last weekend")
    hits = (
        with_mode(app.memory.searcher, "lexical")
        .search(SearchQuery("Where did Maria propose?", BUDDY, limit=1, min_relevance=0.0))
        .hits
    )
    assert [h.memory.id for h in hits] == [memory.id]
    assert hits[0].memory.text == "Maria: In Reykjavik, at the harbour!"
    # The context ranks below the text: a memory that says it beats one whose context does.
    said, _ = app.memory.add("buddy", GLOBAL, "Anna: I propose we meet at the harbour")
    top = (
        with_mode(app.memory.searcher, "lexical")
        .search(SearchQuery("propose harbour", BUDDY, limit=2, min_relevance=0.0))
        .hits
    )
    assert top[0].memory.id == said.id
    app.memory.forget(memory.id)
    assert memory.id not in {
        h.memory.id
        for h in with_mode(app.memory.searcher, "lexical")
        .search(SearchQuery("propose partner", BUDDY, limit=5, min_relevance=0.0))
        .hits
    }


def test_bad_mode_and_bad_context_are_refused(app: App) -> None:
    with pytest.raises(InvalidInput) as info:
        with_mode(app.memory.searcher, "fuzzy")  # type: ignore[arg-type]
    assert info.value.field == "mode"
    with pytest.raises(InvalidInput) as info:
        app.memory.add("buddy", GLOBAL, "ok", metadata={"context": ["not", "text"]})
    assert info.value.field == "metadata.context"
    assert app.memory.count() == 0


def test_query_dates_finds_only_explicit_calendar_days() -> None:
    assert query_dates("What did Maria share on 16 June, 2023?") == {date(2023, 6, 16)}
    assert query_dates("What did Tim finish on 8th December, 2023 and on May 3, 2023?") == {
        date(2023, 12, 8),
        date(2023, 5, 3),
    }
    assert query_dates("notes from 2024-02-29") == {date(2024, 2, 29)}
    assert query_dates("What did I say last week?") == set()
    assert query_dates("What happens on 16 June?") == set()  # no year: not one day
    assert query_dates("on 31 February, 2023") == set()


def test_a_memory_created_on_the_day_the_query_names_ranks_first(app: App) -> None:
    june = app.memory.add(
        "buddy", GLOBAL, "Maria: I joined a gym", created_at=datetime(2023, 6, 16, 14, 0, tzinfo=UTC)
    )[0]
    app.memory.add(
        "buddy", GLOBAL, "Maria: great news, I joined a choir!", created_at=datetime(2023, 8, 2, 9, 0, tzinfo=UTC)
    )
    hits = app.memory.search(
        SearchQuery("What great news did Maria share on 16 June, 2023?", BUDDY, limit=2, min_relevance=0.0)
    ).hits
    assert hits[0].memory.id == june.id  # the other one matches more of the words
    # Only the hybrid search uses the date; with date_weight 0 nothing is boosted.
    assert app.memory.fusion.date_weight > 0
    dense = (
        with_mode(app.memory.searcher, "dense")
        .search(SearchQuery("What great news did Maria share on 16 June, 2023?", BUDDY, limit=2, min_relevance=0.0))
        .hits
    )
    assert {h.relevance for h in dense} != {h.relevance for h in hits}


def test_the_full_text_side_is_read_while_the_query_is_embedded(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search begins the query's embedding, reads its full-text matches meanwhile, and only
    then waits for the vector: an embedder that answers only once the words were searched is
    not waited for in vain (were the query embedded first, it would time out)."""
    from agentd.memory import MemoryService

    for text in TRIPS.values():
        app.memory.add("buddy", GLOBAL, text)
    searched = threading.Event()
    search_words = app.store.words.search

    def words_then_signal(*args: Any, **kwargs: Any) -> Any:
        found = search_words(*args, **kwargs)
        searched.set()
        return found

    monkeypatch.setattr(app.store.words, "search", words_then_signal)

    class AnswersOnceTheWordsAreSearched:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        def embed_queries(self, texts: Any) -> Any:
            if not searched.wait(5):
                raise RuntimeError("the query was embedded before the full-text index was read")
            return self._inner.embed_queries(texts)

    memory = MemoryService(app.store, AnswersOnceTheWordsAreSearched(app.embedder), app.config.memory)
    [hit] = memory.search(SearchQuery("Who flies to Lisbon on 27 May?", BUDDY, limit=1, min_relevance=0.0)).hits
    assert hit.memory.text == TRIPS["27 May"]
    assert hit.score > 0


CONCERT = [
    "Marco: the concert last night was amazing, best show this year",
    "Priya: the concert tickets sold out in minutes",
    "Marco: I might go to another concert next month",
    "Oksana: honestly the drummer was off-beat the whole night",
]
DAYS = [
    "Booked a dentist appointment for next Tuesday",
    "Started learning the cello in January",
    "The car needs new winter tyres",
    "Finished reading a novel about a lighthouse keeper",
    "Our team moved to a new office downtown",
    "Tried a new yoga studio near work",
]


def _top(app: App, query: str, mode: str = "hybrid") -> str:
    return (
        with_mode(app.memory.searcher, mode)
        .search(SearchQuery(query, BUDDY, limit=1, min_relevance=0.0))
        .hits[0]
        .memory.text
    )  # type: ignore[arg-type]


def test_a_query_naming_someone_ranks_their_memory_first(app: App) -> None:
    """The embedding reads "the concert" as the topic and ranks Marco's concert memories
    above Oksana's, which never says "concert"; the name is what tells them apart. A query
    that names someone weighs word matches strongly (agentd/search/fusion.py); with the one
    weight every query had before, Marco's memory still came first."""
    for text in CONCERT + DAYS:
        app.memory.add("buddy", GLOBAL, text)
    query = "What did Oksana say about the concert?"
    assert _top(app, query, "dense").startswith("Marco:")
    assert _top(app, query) == "Oksana: honestly the drummer was off-beat the whole night"


def test_a_first_person_question_is_not_taken_over_by_a_memory_that_shares_its_words(app: App) -> None:
    """ "What did I cook for my parents' anniversary?" shares no word with the memory that
    answers it (a lasagna for mom and dad's wedding celebration) and three with one about a
    cancelled party; the embedding ranks the answer first. A query that names nothing
    weighs word matches lightly, so the shared words no longer reorder it (they did with
    one weight for every query); the same holds written in lower case."""
    answer = "Made a lasagna for mom and dad's thirtieth wedding celebration"
    for text in [answer, "My parents' anniversary party was cancelled, so I cooked nothing", *CONCERT, *DAYS]:
        app.memory.add("buddy", GLOBAL, text)
    for query in ["What did I cook for my parents' anniversary?", "what did i cook for my parents' anniversary"]:
        assert _top(app, query, "dense") == answer
        assert _top(app, query) == answer


def test_named_words_are_capitalised_words_where_no_sentence_starts() -> None:
    assert named_words("When did Caroline go to the LGBTQ support group?") == ["Caroline", "LGBTQ"]
    assert named_words("Did I finish reading 'The Nightingale' by Kristin Hannah?") == [
        "Nightingale",
        "Kristin",
        "Hannah",
    ]
    assert named_words("How many doctor's appointments did I go to in March?") == ["March"]
    # "I" and a sentence's first word are capitalised whatever they are.
    assert named_words("I've been stuck lately. Any ideas? What should I paint?") == []
    assert named_words("what did caroline say") == []


def test_plain_query_weights_come_from_the_model_unless_configured() -> None:
    words = WordWeights(0.6, 40.0, 0.1, plain_weight=0.05, plain_saturation=30.0)
    fusion = Fusion.of(words, MemoryConfig())
    plain = fusion.for_query("where does my sister live?")
    assert (plain.lexical_weight, plain.lexical_saturation) == (0.05, 30.0)
    assert fusion.for_query("Where does Ana live?") == fusion
    configured = Fusion.of(
        words, MemoryConfig(tuning=MemoryTuning(plain_lexical_weight=0.2, plain_lexical_saturation=20.0))
    )
    assert configured.for_query("where does my sister live?").lexical_weight == 0.2
    # A model without plain weights gives every query its one weight (or the configured one).
    same = Fusion.of(WordWeights(1.5, 10.0, 0.5), MemoryConfig(tuning=MemoryTuning(lexical_weight=0.3)))
    assert same.for_query("where does my sister live?") == same
    assert same.lexical_weight == 0.3


def test_a_question_that_counts_gets_the_naming_weights() -> None:
    """ "How many rare items do I have in total?" is answered by every session that mentions one item,
    and the words it shares with them gather them (LongMemEval-S dev recall_all@5 0.938 -> 0.951)."""
    fusion = Fusion.of(WordWeights(0.6, 40.0, 0.1, plain_weight=0.05, plain_saturation=30.0), MemoryConfig())
    for query in [
        "how many rare items do I have in total?",
        "How much have I made from selling eggs this month?",
        "what is the total number of episodes I've listened to?",
    ]:
        assert counts(query)
        assert fusion.for_query(query) == fusion
    for query in ["where does my sister live?", "How do I save a file?", "a muchness of things"]:
        assert not counts(query)
        assert fusion.for_query(query).lexical_weight == 0.05
