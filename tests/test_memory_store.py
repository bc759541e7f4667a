"""The memory store through the memory service: the recall skill's cases, scopes, dedupe, forget, import."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from agentd import EmbedderNotConfigured, EmbeddingMismatch, InvalidInput, NotFound, StoreError
from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.app import App
from agentd.config import Config
from agentd.embedders.local import LocalEmbedder
from agentd.memory import MemoryService
from agentd.search import SearchQuery
from agentd.search.engine import with_mode
from agentd.store import Store
from agentd.store.memories import NewMemory
from tests.conftest import newest_migration
from tests.support.fakeopenai import FakeOpenAI

pytestmark = pytest.mark.both_backends

BUDDY = Reach("buddy")


def test_a_related_query_returns_three_memories_with_scores_best_first(app: App) -> None:
    """Store 3 memories; a related query returns the relevant one first, with scores, highest first."""
    for text, cat in [
        ("User's favorite color is blue", "preference"),
        ("User is working on a Rust web server project", "fact"),
        ("User has a cat called Miso", "fact"),
    ]:
        app.memory.add("buddy", GLOBAL, text, cat)
    hits = app.memory.search(SearchQuery("What color does the user like?", BUDDY, min_relevance=0.0)).hits
    assert len(hits) == 3
    assert hits[0].memory.text == "User's favorite color is blue"
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    result = hits[0].as_result()
    assert set(result) >= {"text", "category", "score", "created_at"}
    assert result["category"] == "preference"
    assert result["created_at"].endswith("Z")


def test_limit_caps_the_hits_and_the_default_is_5(app: App) -> None:
    for i in range(8):
        app.memory.add("buddy", GLOBAL, f"User note number {i} about programming in Python")
    assert len(app.memory.search(SearchQuery("Python programming", BUDDY, limit=1, min_relevance=0.0)).hits) == 1
    assert app.memory.config.search_results == 5
    assert len(app.memory.search(SearchQuery("Python programming", BUDDY, min_relevance=0.0)).hits) == 5


def test_an_empty_store_gives_an_empty_list(app: App) -> None:
    assert app.memory.search(SearchQuery("anything at all", BUDDY)).hits == ()


def test_cooking_ranks_above_programming_for_food_recipes(app: App) -> None:
    cooking = ["User loves cooking Italian pasta dishes", "User bakes sourdough bread every weekend"]
    programming = ["User writes Go microservices at work", "User is learning Rust lifetimes"]
    for text in cooking + programming:
        app.memory.add("buddy", GLOBAL, text)
    hits = app.memory.search(SearchQuery("food recipes", BUDDY, limit=4, min_relevance=0.0)).hits
    top_two = {h.memory.text for h in hits[:2]}
    assert top_two == set(cooking)


def test_relevance_threshold_with_shipped_defaults(app: App) -> None:
    """A memory of "User likes Python" for "What programming language should I learn?" passes the
    default threshold; an unrelated memory does not."""
    app.memory.add("buddy", GLOBAL, "User likes Python", "preference")
    app.memory.add("buddy", GLOBAL, "User's dog is named Max")
    assert app.memory.config.min_score == 0.5
    python = app.memory.search(SearchQuery("What programming language should I learn?", BUDDY)).hits
    assert [h.memory.text for h in python] == ["User likes Python"]
    assert python[0].relevance >= 0.5
    assert app.memory.search(SearchQuery("Explain quantum entanglement", BUDDY)).hits == ()


def test_scope_isolation(app: App) -> None:
    """Channel A's memory never reaches channel B, user X's never user Y, other personas never."""
    m = app.memory
    m.add("buddy", Scope.channel("a"), "The deploy password rotation happens on Fridays")
    m.add("buddy", Scope.user("x"), "The user x prefers deploys on Fridays")
    m.add("buddy", GLOBAL, "Deploys are frozen on Fridays company-wide")
    m.add("scholar", GLOBAL, "Scholar thinks Friday deploys are fine")
    query = "when are deploys on Fridays"

    def texts(reach: Reach) -> set[str]:
        return {h.memory.text for h in m.search(SearchQuery(query, reach, limit=20, min_relevance=0.0)).hits}

    assert texts(Reach("buddy", channel="a", user="x")) == {
        "The deploy password rotation happens on Fridays",
        "The user x prefers deploys on Fridays",
        "Deploys are frozen on Fridays company-wide",
    }
    assert texts(Reach("buddy", channel="b", user="y")) == {"Deploys are frozen on Fridays company-wide"}
    assert texts(Reach("buddy", channel="b", user="x")) == {
        "The user x prefers deploys on Fridays",
        "Deploys are frozen on Fridays company-wide",
    }
    assert texts(Reach("scholar", channel="a", user="x")) == {"Scholar thinks Friday deploys are fine"}
    assert len(texts(Reach("buddy", everywhere=True))) == 3


def test_the_same_text_in_the_same_persona_and_scope_is_stored_once(app: App) -> None:
    first, created = app.memory.add("buddy", GLOBAL, "User likes Python")
    again, created_again = app.memory.add("buddy", GLOBAL, "  user likes   PYTHON ")
    elsewhere, created_elsewhere = app.memory.add("buddy", Scope.channel("c"), "User likes Python")
    assert created
    assert not created_again
    assert created_elsewhere
    assert again.id == first.id != elsewhere.id
    assert app.memory.count("buddy") == 2


def test_a_text_repeated_in_one_batch_is_embedded_once_and_every_copy_gets_its_vector(
    config: Config, embedder: LocalEmbedder
) -> None:
    """An import that repeats a text thousands of times embeds it once; a copy in another scope
    (a memory of its own) is found by meaning as the first is."""
    asked: list[str] = []

    class Counting:
        """The real embedder, counting the passages it is asked for."""

        def __init__(self) -> None:
            self.model_id, self.dimension = embedder.model_id, embedder.dimension
            self.calibration, self.words = embedder.calibration, embedder.words

        def embed(self, texts: list[str]) -> Any:
            asked.extend(texts)
            return embedder.embed(texts)

        def embed_queries(self, texts: list[str]) -> Any:
            return embedder.embed_queries(texts)

    app = App(config, embedder=Counting())
    try:
        text = "User keeps bees on the roof"
        items = [NewMemory("buddy", GLOBAL, "fact", text, {}) for _ in range(500)]
        items += [NewMemory("buddy", Scope.channel("c"), "fact", text, {}), NewMemory("buddy", GLOBAL, "fact", "Other")]
        added = app.memory.add_many(items)
        assert sorted(asked) == ["Other", text]
        assert [created for _mid, created in added].count(True) == 3
        for scope in (GLOBAL, Scope.channel("c")):  # each copy by its own vector
            hits = app.memory.search(
                SearchQuery("who keeps bees?", Reach("buddy", channel="c"), min_relevance=0.0, scopes=[scope])
            ).hits
            assert [h.memory.text for h in hits] == [text]
            assert hits[0].memory.scope == scope
    finally:
        app.close()


def test_forget_removes_row_vector_and_words(app: App) -> None:
    mem, _ = app.memory.add("buddy", GLOBAL, "User likes Python")
    app.memory.forget(mem.id)
    assert app.memory.search(SearchQuery("Python", BUDDY, min_relevance=0.0)).hits == ()
    with app.store.read() as conn:
        assert app.store.vectors.count(conn) == 0
        assert app.store.words.count(conn) == 0
        assert app.store.words.search(conn, ["python"], "buddy", [], 5) == []
    with pytest.raises(NotFound):
        app.memory.forget(mem.id)


def test_a_forgotten_memory_id_is_never_given_to_a_new_memory(app: App) -> None:
    """Forgetting the newest memory, then adding one: the old id still 404s, the new memory is untouched."""
    app.memory.add("buddy", GLOBAL, "User likes Python")
    newest, _ = app.memory.add("buddy", GLOBAL, "User's dog is named Max")
    app.memory.forget(newest.id)
    later, _ = app.memory.add("buddy", GLOBAL, "User lives in Lisbon")
    assert later.id > newest.id
    with pytest.raises(NotFound):
        app.memory.forget(newest.id)
    assert [
        h.memory.id
        for h in with_mode(app.memory.searcher, "lexical").search(SearchQuery("Lisbon", BUDDY, min_relevance=0.0)).hits
    ] == [later.id]


def test_metadata_and_created_at_are_kept_and_returned(app: App) -> None:
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    app.memory.add("buddy", GLOBAL, "Caroline went to a support group", metadata={"dia_id": "D1:3"}, created_at=when)
    (hit,) = app.memory.search(SearchQuery("support group", BUDDY, min_relevance=0.0)).hits
    assert hit.memory.metadata == {"dia_id": "D1:3"}
    assert hit.as_result()["created_at"] == "2023-05-08T13:56:00Z"


def test_time_decay_ranks_a_fresh_memory_above_an_old_identical_match(app: App) -> None:
    now = datetime.now(UTC)
    app.memory.add("buddy", GLOBAL, "User lives in Berlin", created_at=now - timedelta(days=400))
    app.memory.add("buddy", Scope.channel("c"), "User lives in Berlin", created_at=now)
    hits = app.memory.search(
        SearchQuery("where does the user live", Reach("buddy", channel="c"), min_relevance=0.0)
    ).hits
    assert [str(h.memory.scope) for h in hits] == ["channel:c", "global"]
    assert hits[0].relevance == pytest.approx(hits[1].relevance, abs=1e-6)
    assert hits[1].score < hits[0].score
    # Age takes at most decay_weight (20%) of the relevance.
    assert hits[1].score >= 0.8 * hits[1].relevance - 1e-9


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"text": "   "}, "text"),
        ({"text": "x" * 8001}, "text"),
        ({"text": "ok", "category": "bad\ncategory"}, "category"),
        ({"text": "ok", "metadata": ["not", "an", "object"]}, "metadata"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(app: App, kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        app.memory.add("buddy", GLOBAL, **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    assert app.memory.count() == 0


def test_unknown_persona_and_scope_are_refused(app: App) -> None:
    with pytest.raises(NotFound, match="known personas: buddy, scholar"):
        app.memory.add("nobody", GLOBAL, "text")
    with pytest.raises(InvalidInput, match="scope"):
        Scope.parse("team:x")
    with pytest.raises(InvalidInput):
        Scope.channel("has space")


def test_empty_query_is_invalid(app: App) -> None:
    with pytest.raises(InvalidInput, match="query"):
        app.memory.search(SearchQuery("  ", BUDDY))


def test_import_jsonl_reports_bad_lines_and_imports_the_rest(app: App, tmp_path: Path) -> None:
    lines = [
        json.dumps({"text": "User likes Python", "category": "preference"}),
        "{not json",
        json.dumps({"text": "   "}),
        json.dumps({"text": "Team uses SQLite", "scope": "channel:eng", "metadata": {"src": "wiki"}}),
        json.dumps({"text": "User likes Python"}),
        json.dumps({"text": "x", "persona": "nobody"}),
        json.dumps({"text": "x", "scope": "galaxy"}),
        json.dumps({"text": "x", "created_at": "yesterday"}),
        json.dumps({"text": "x", "colour": "red"}),
        "",
        json.dumps({"text": "Old fact", "created_at": "2020-01-01T00:00:00Z", "scope": "user:al"}),
    ]
    path = tmp_path / "mem.jsonl"
    path.write_text("\n".join(lines) + "\n")
    seen: list[tuple[int, int]] = []
    report = app.memory.import_jsonl(path, "buddy", progress=lambda d, t: seen.append((d, t)))
    assert report.added == 3
    assert report.duplicates == 1
    assert [n for n, _ in report.skipped] == [2, 3, 6, 7, 8, 9]
    reasons = dict(report.skipped)
    assert "not valid JSON" in reasons[2]
    assert reasons[3].startswith("text:")
    assert "nobody" in reasons[6]
    assert reasons[9].startswith("colour:")
    assert seen[-1] == (4, 4)
    old = app.memory.list_memories("buddy", Scope.user("al"))
    assert old[0].created_at == datetime(2020, 1, 1, tzinfo=UTC)


def test_concurrent_writers_all_land(app: App) -> None:
    """Eight threads adding memories at once: every one is stored, none fails on a lock."""
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(15):
                app.memory.add("buddy", Scope.channel(f"c{n}"), f"writer {n} fact {i}")
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert app.memory.count("buddy") == 120
    with app.store.read() as conn:
        assert app.store.vectors.count(conn) == app.store.words.count(conn) == 120


@pytest.mark.sqlite_only
def test_the_database_is_created_upgraded_and_in_wal_mode(app: App, config: Config) -> None:
    app.memory.count()
    with app.store.read() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
        assert conn.exec_driver_sql("PRAGMA page_size").scalar_one() == 65536
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one() == newest_migration()
    assert (config.base_dir / "agentd.db").is_file()


def test_a_postgresql_store_is_created_upgraded_and_keeps_its_statistics(app: App, backend: str) -> None:
    """On PostgreSQL: at the newest revision, pgvector's HNSW index exists, bm25's counts follow adds and forgets."""
    if backend != "postgres":
        assert app.store.backend == "sqlite"
        return
    ids = [app.memory.add("buddy", GLOBAL, f"User note {i} about rivers")[0].id for i in range(3)]
    app.memory.forget(ids[1])
    with app.store.read() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one() == newest_migration()
        assert conn.exec_driver_sql("SELECT to_regclass('memory_vectors_hnsw') IS NOT NULL").scalar_one()
        documents, tokens = conn.exec_driver_sql("SELECT documents, tokens FROM memory_words_stats").one()
        assert documents == app.store.words.count(conn) == 2
        assert tokens == conn.exec_driver_sql("SELECT sum(length) FROM memory_words").scalar_one() > 0


@pytest.mark.sqlite_only
def test_an_unreadable_database_path_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError, match="is not a file"):
        Store.open(f"sqlite:///{tmp_path / 'dir.db'}")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot create"):
        Store.open(f"sqlite:///{blocker / 'sub' / 'x.db'}")


def test_no_embedder_stores_memories_but_search_says_why(config: Config) -> None:
    app = App(config, embedder=None)
    try:
        mem, created = app.memory.add("buddy", GLOBAL, "User likes Python")
        assert created
        assert mem.text == "User likes Python"
        with pytest.raises(EmbedderNotConfigured, match="embedding model"):
            app.memory.search(SearchQuery("Python", BUDDY))
    finally:
        app.close()


def test_a_store_built_with_one_model_refuses_another_until_reembedded(
    app: App, config: Config, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Vectors of two models never mix: a clear error naming both, then reembed fixes it."""
    from agentd.llm.embedding import LitellmEmbedder

    app.memory.add("buddy", GLOBAL, "User likes Python")
    app.memory.add("buddy", Scope.channel("c"), "Team ships on Tuesdays")
    other = LitellmEmbedder("openai/fake-embed", api_base=fake_openai.url, api_key_env="FAKE_KEY")
    monkeypatch.setenv("FAKE_KEY", "k")
    with pytest.raises(EmbeddingMismatch) as info:
        MemoryService(app.store, other, config.memory, ["buddy"])
    message = str(info.value)
    assert "e5-small-v2-onnx-int8" in message
    assert "openai/fake-embed" in message
    assert "reembed" in message

    service = MemoryService(app.store, other, config.memory, ["buddy"], check_embedding=False)
    assert service.reembed() == 2
    assert app.store.embedding_space().model_id == "openai/fake-embed"  # type: ignore[union-attr]
    assert app.store.embedding_space().dimension == 64  # type: ignore[union-attr]
    # Now the new model is the store's model, and its vectors answer searches.
    service = MemoryService(app.store, other, config.memory, ["buddy"])
    hits = service.search(SearchQuery("python", BUDDY, min_relevance=0.0)).hits
    assert hits[0].memory.text == "User likes Python"
    with pytest.raises(EmbeddingMismatch):
        MemoryService(app.store, app.embedder, config.memory, ["buddy"])


def test_rows_vectors_and_words_stay_consistent(app: App) -> None:
    ids = [app.memory.add("buddy", Scope.channel(f"c{i % 3}"), f"fact {i}")[0].id for i in range(9)]
    app.memory.forget(ids[4])
    with app.store.read() as conn:
        rows = {r[0] for r in conn.execute(sa.text("SELECT id FROM memories"))}
        vecs = {r[0] for r in app.store.vectors.fetch(conn, ids)}
        assert app.store.words.count(conn) == len(rows)
    assert rows == vecs == set(ids) - {ids[4]}
