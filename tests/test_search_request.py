"""The search package's one request and one result: hits, near misses, excluded memories and timings
filled by one search, and the one-sided modes reachable only through the measuring seam."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime

import pytest

from agentd._exceptions import InvalidInput
from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.app import App
from agentd.memory import MemoryService
from agentd.search import SearchQuery, SearchResult
from agentd.search.engine import with_mode

QUESTION = "What programming language should I learn?"


def test_a_result_carries_hits_and_near_misses_below_the_threshold(app: App) -> None:
    app.memory.add("buddy", GLOBAL, "User likes Python", "preference")
    app.memory.add("buddy", GLOBAL, "User's dog is named Max")
    app.memory.add("buddy", GLOBAL, "The office closes at six on Fridays")
    result = app.memory.search(SearchQuery(QUESTION, Reach("buddy"), near_misses=3, near_floor=0.0))
    assert isinstance(result, SearchResult)
    assert [h.memory.text for h in result.hits] == ["User likes Python"]
    assert result.near_misses, "the memories below the threshold come back as near misses"
    assert all(h.relevance < app.memory.config.min_score for h in result.near_misses)
    assert not {h.memory.id for h in result.near_misses} & {h.memory.id for h in result.hits}
    assert result.intent == "topic"
    # Without asking for them, none.
    assert app.memory.search(SearchQuery(QUESTION, Reach("buddy"))).near_misses == ()


def test_a_result_says_what_a_shared_channel_excluded_and_why(app: App) -> None:
    secret, _ = app.memory.add("buddy", Scope.user("alice"), "Alice's dog is named Max")
    shared = Reach("buddy", "general", "alice", shared_channel="general")
    result = app.memory.search(SearchQuery("What is my dog called?", shared, min_relevance=0.0))
    assert secret.id not in {h.memory.id for h in result.hits}
    (excluded,) = result.excluded
    assert (excluded.id, excluded.scope, excluded.learned_in) == (secret.id, "user:alice", None)
    assert "not in the shared channel #general" in excluded.reason
    # In the user's own direct channel nothing is excluded and the memory is found.
    direct = app.memory.search(SearchQuery("What is my dog called?", Reach("buddy", "dm-alice", "alice")))
    assert direct.excluded == ()
    assert [h.memory.id for h in direct.hits] == [secret.id]


def test_a_result_times_each_stage_of_the_search(app: App) -> None:
    app.memory.add("buddy", GLOBAL, "User likes Python", "preference")
    timings = app.memory.search(SearchQuery(QUESTION, Reach("buddy"))).timings
    stages = [timings.words, timings.embed_wait, timings.vectors, timings.rank, timings.load]
    assert all(t >= 0 for t in stages)
    assert timings.vectors > 0
    assert timings.total >= sum(stages)
    assert set(timings.as_json()) == {"words_ms", "embed_wait_ms", "vectors_ms", "rank_ms", "load_ms", "total_ms"}
    # A greeting searches nothing: no stage ran, the check itself is timed.
    greeting = app.memory.search(SearchQuery("hello!", Reach("buddy")))
    assert (greeting.hits, greeting.intent) == ((), "none")
    assert greeting.timings.vectors == greeting.timings.words == 0
    assert greeting.timings.total > 0


def test_the_request_is_a_frozen_value_and_is_checked(app: App) -> None:
    request = SearchQuery(QUESTION, Reach("buddy"), limit=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.limit = 3  # type: ignore[misc]
    with pytest.raises(InvalidInput) as info:
        app.memory.search(dataclasses.replace(request, limit=0))
    assert info.value.field == "limit"
    with pytest.raises(InvalidInput) as info:
        app.memory.search(dataclasses.replace(request, query="  "))
    assert info.value.field == "query"


def test_one_sided_search_is_a_measuring_seam_not_part_of_the_interface(app: App) -> None:
    assert "mode" not in {f.name for f in dataclasses.fields(SearchQuery)}
    assert list(inspect.signature(MemoryService.search).parameters) == ["self", "request"]
    app.memory.add("buddy", GLOBAL, "User likes Python", "preference")
    app.memory.add("buddy", GLOBAL, "The zanzibar office opens at nine")
    request = SearchQuery("zanzibar", Reach("buddy"), limit=5, min_relevance=0.0, now=datetime.now(UTC))
    lexical = with_mode(app.memory.searcher, "lexical").search(request)
    assert [h.memory.text for h in lexical.hits] == ["The zanzibar office opens at nine"]
    assert len(with_mode(app.memory.searcher, "dense").search(request).hits) == 2
    assert with_mode(app.memory.searcher, "hybrid").search(request).hits == app.memory.search(request).hits
