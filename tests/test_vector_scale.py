"""Vector search at scale: scope isolation across vec0 partitions, the binary coarse path, and its upkeep.

Real SQLite files in ``tmp_path`` and the real local embedder; hand-made unit
vectors only where a test needs more vectors than it is worth embedding.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig

from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.app import App
from agentd.config import Config, MemoryConfig
from agentd.embedders.local import LocalEmbedder
from agentd.memory import MemoryService, NewMemory
from agentd.search import SearchQuery
from agentd.search.subjects import indexed_text
from agentd.store import Store, migrate, vectors
from agentd.store.engine import create_engine
from agentd.store.pgvectors import PgVectors
from testkit.bulk import bulk
from tests.conftest import PostgresDatabases
from tests.support.fakeopenai import FakeOpenAI

QUERY = "Which programming language does the user write at work?"


def _unit(rows: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _ids(conn: sa.Connection, table: str) -> set[int]:
    return {int(r[0]) for r in conn.exec_driver_sql(f"SELECT rowid FROM {table}")}


def _bits_match_floats(conn: sa.Connection) -> bool:
    """Every bit vector is the quantized float vector of the same memory, and nothing else is there."""
    floats = dict(conn.exec_driver_sql(f"SELECT rowid, vec_quantize_binary(embedding) FROM {vectors.TABLE}").all())
    bits = dict(conn.exec_driver_sql(f"SELECT rowid, embedding FROM {vectors.COARSE}").all())
    return floats == bits


# -- scope isolation across partitions --------------------------------------------------


@pytest.mark.both_backends
def test_a_search_sees_only_its_persona_channel_user_and_global(app: App) -> None:
    """The same text in every scope: each reach gets exactly its own scopes, global always."""
    text = "User writes Go microservices at work"
    for persona in ("buddy", "scholar"):
        for scope in (GLOBAL, Scope.channel("a"), Scope.channel("b"), Scope.user("x"), Scope.user("y")):
            app.memory.add(persona, scope, text)
    cases = {
        Reach("buddy", channel="a"): {"global", "channel:a"},
        Reach("buddy", channel="b", user="y"): {"global", "channel:b", "user:y"},
        Reach("buddy", user="x"): {"global", "user:x"},
        Reach("buddy"): {"global"},
        Reach("buddy", everywhere=True): {"global", "channel:a", "channel:b", "user:x", "user:y"},
    }
    for reach, allowed in cases.items():
        hits = app.memory.search(SearchQuery(QUERY, reach, limit=10, min_relevance=0.0)).hits
        assert {str(h.memory.scope) for h in hits} == allowed, reach
        assert {h.memory.persona for h in hits} == {"buddy"}, reach


@pytest.mark.both_backends
def test_a_multi_scope_search_merges_partitions_into_one_exact_top_k(app: App, embedder: LocalEmbedder) -> None:
    """sqlite-vec answers IN/OR on partition keys with unmerged per-partition lists; agentd merges.

    The expected answer is computed here by brute force over the allowed
    memories only: k results, not k per scope, in one global order, with the
    best matches drawn from every partition and nothing from the others.
    """
    texts = {
        GLOBAL: ["User writes Go at work", "User has a cat called Miso", "User's favourite color is blue"],
        Scope.channel("a"): ["User codes in Rust at the office", "The team ships on Tuesdays", "Lunch is at noon"],
        Scope.user("x"): ["User programs Python for their job", "User runs marathons", "User likes jazz piano"],
    }
    # Closer matches than any allowed one, in scopes and a persona the reach excludes.
    for scope in (Scope.channel("b"), Scope.user("y")):
        app.memory.add("buddy", scope, QUERY)
    app.memory.add("scholar", GLOBAL, QUERY)
    stored: dict[int, str] = {}
    for scope, group in texts.items():
        for text in group:
            stored[app.memory.add("buddy", scope, text)[0].id] = text

    qvec = embedder.embed_queries([QUERY])[0]
    ids = list(stored)
    # A user's memory is embedded without a subject naming the user (agentd/search/subjects.py).
    sims = embedder.embed([indexed_text(stored[i], app.memory.get(i).scope) for i in ids]) @ qvec
    k = 4
    expected = [ids[j] for j in np.argsort(-sims, kind="stable")[:k]]
    with app.store.read() as conn:
        got = app.store.vectors.nearest(conn, qvec, "buddy", ["global", "channel:a", "user:x"], k)
    assert [mid for mid, _ in got] == expected
    assert len({app.memory.get(mid).scope for mid in expected}) >= 2  # the top k really spans partitions
    assert [round(s, 4) for _, s in got] == [round(float(s), 4) for s in sorted(sims, reverse=True)[:k]]


def test_sqlite_vec_answers_in_on_partition_keys_unmerged(tmp_path: Path) -> None:
    """Why nearest() runs one query per scope: vec0 0.1.9 gives k rows per partition for IN, unordered overall.

    If this starts failing, sqlite-vec merges by itself now and the per-scope
    loop could become one query (the merge test above keeps the contract).
    """
    vecs = _unit(60, seed=8)
    store = _vector_store(tmp_path, vecs, personas=("p",))
    with store.read() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT rowid, distance FROM {vectors.TABLE} WHERE embedding MATCH ? AND k = 3 "
            "AND persona = 'p' AND scope IN ('channel:c1', 'channel:c2')",
            (vecs[0].tobytes(),),
        ).all()
        merged = vectors.nearest(conn, vecs[0], "p", ["channel:c1", "channel:c2"], 3)
    assert len(rows) == 6  # 3 per partition, not 3
    assert len(merged) == 3
    assert [mid for mid, _ in merged] == [int(r[0]) for r in sorted(rows, key=lambda r: (r[1], r[0]))[:3]]
    store.close()


# -- the binary coarse stage --------------------------------------------------------------


def store_scope(conn: sa.Connection, memory_id: int) -> str:
    """The scope partition a vector was stored in."""
    return str(conn.exec_driver_sql(f"SELECT scope FROM {vectors.TABLE} WHERE rowid = ?", (memory_id,)).scalar_one())


def _vector_store(tmp_path: Path, vecs: np.ndarray, personas: tuple[str, ...] = ("p", "q")) -> Store:
    store = Store.open(f"sqlite:///{tmp_path / 'vec.db'}", dimension=vecs.shape[1])
    rows = [(i + 1, personas[i % len(personas)], f"channel:c{i % 7}", v) for i, v in enumerate(vecs)]
    with store.write() as conn:
        for start in range(0, len(rows), 500):
            vectors.insert(conn, rows[start : start + 500])
    return store


def test_the_coarse_path_returns_the_exact_nearest_neighbours(tmp_path: Path) -> None:
    """Many more vectors than the rescoring pool, some deleted: persona-wide top hits equal brute force."""
    vecs = _unit(1200)
    store = _vector_store(tmp_path, vecs)
    deleted = set(range(2, len(vecs), 9))
    with store.write() as conn:
        for mid in deleted:
            vectors.delete(conn, mid)
    noise = np.random.default_rng(1).normal(0, 0.01, vecs.shape[1]).astype(np.float32)
    with store.read() as conn:
        for target in (1, 5, 601, 1197):
            query = vecs[target - 1] + noise
            coarse = vectors.nearest(conn, query, "p", (), 5, exact_limit=0, candidates=50)
            exact = vectors.nearest(conn, query, "p", (), 5, exact=True)
            assert coarse[0][0] == exact[0][0] == target
            assert coarse[0][1] == pytest.approx(exact[0][1], abs=1e-5)
            assert all(mid % 2 == 1 and mid not in deleted for mid, _ in coarse)  # persona p only
    store.close()


def test_the_coarse_candidates_are_the_hamming_nearest(tmp_path: Path) -> None:
    """The chunk-reading scan agrees with a Hamming brute force and with vec0's own k-NN."""
    vecs = _unit(1500, seed=3)
    store = _vector_store(tmp_path, vecs, personas=("p",))
    with store.write() as conn:
        for mid in (3, 4, 700):
            vectors.delete(conn, mid)
    alive = [i for i in range(1, 1501) if i not in (3, 4, 700)]
    query = _unit(1, seed=9)[0]
    signs = vecs > 0
    hamming = {i: int(np.count_nonzero(signs[i - 1] != (query > 0))) for i in alive}
    n = 200
    with store.read() as conn:
        got = vectors.coarse_candidates(conn, query.tobytes(), "p", (), n)
        assert vectors.coarse_candidates(conn, query.tobytes(), "p", (), n, exact_limit=1497) is None
        vec0 = conn.exec_driver_sql(
            f"SELECT distance FROM {vectors.COARSE} WHERE embedding MATCH vec_quantize_binary(?) "
            "AND k = ? AND persona = 'p'",
            (query.tobytes(), n),
        ).all()
    assert len(got) == len(set(got)) == n
    assert sorted(hamming[i] for i in got) == sorted(hamming.values())[:n] == sorted(int(d) for (d,) in vec0)
    store.close()


def test_a_large_scoped_search_through_the_bits_keeps_to_its_scopes(tmp_path: Path) -> None:
    """Forced through the coarse path, a multi-scope search still sees only its scopes, merged."""
    vecs = _unit(2100, seed=4)
    store = _vector_store(tmp_path, vecs)  # personas p/q alternate, scopes channel:c0..c6
    allowed = ["channel:c1", "channel:c4"]
    members = [i + 1 for i in range(len(vecs)) if i % 2 == 0 and f"channel:c{i % 7}" in allowed]
    with store.read() as conn:
        for target in members[:3] + members[-2:]:
            query = vecs[target - 1]
            coarse = vectors.nearest(conn, query, "p", allowed, 20, exact_limit=0, candidates=20)
            exact = vectors.nearest(conn, query, "p", allowed, 20, exact=True)
            assert coarse[0][0] == exact[0][0] == target
            assert {mid for mid, _ in coarse} <= set(members)
            assert len(coarse) == 20
            # Candidates from both partitions, merged before rescoring.
            assert {store_scope(conn, mid) for mid, _ in coarse} == set(allowed)
    store.close()


# -- upkeep: forget, reembed, migrate, rebinding -------------------------------------------


def test_forget_removes_the_bit_vector_too(app: App) -> None:
    ids = [app.memory.add("buddy", Scope.channel(f"c{i % 3}"), f"User fact number {i}")[0].id for i in range(6)]
    gone = app.memory.forget(ids[2])
    with app.store.read() as conn:
        assert _ids(conn, vectors.COARSE) == _ids(conn, vectors.TABLE) == set(ids) - {ids[2]}
        assert _bits_match_floats(conn)
    hits = app.memory.search(SearchQuery(gone.text, Reach("buddy", everywhere=True), limit=10, min_relevance=0.0)).hits
    assert ids[2] not in {h.memory.id for h in hits}


def test_reembed_rebuilds_the_bit_table_for_the_new_model(
    app: App, config: Config, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After re-embedding with a model of another dimension, the bits are the new model's."""
    from agentd.llm.embedding import LitellmEmbedder

    for i, text in enumerate(["User likes Python", "Team ships on Tuesdays", "User has a cat"]):
        app.memory.add("buddy", Scope.channel(f"c{i}"), text)
    monkeypatch.setenv("FAKE_KEY", "k")
    other = LitellmEmbedder("openai/fake-embed", api_base=fake_openai.url, api_key_env="FAKE_KEY")
    service = MemoryService(app.store, other, config.memory, ["buddy"], check_embedding=False)
    assert service.reembed() == 3
    with app.store.read() as conn:
        assert vectors.table_dimension(conn, vectors.COARSE) == vectors.table_dimension(conn) == 64
        assert len(_ids(conn, vectors.COARSE)) == 3
        assert _bits_match_floats(conn)
    hits = service.search(SearchQuery("python", Reach("buddy", everywhere=True), min_relevance=0.0)).hits
    assert hits[0].memory.text == "User likes Python"


@pytest.mark.slow  # the litellm embedder starts a process (the fast tier refuses one)
def test_a_store_bound_to_another_dimension_keeps_its_bit_table_in_step(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new store sized for 384-d and bound to a 64-d model follows with its bit table."""
    from agentd.llm.embedding import LitellmEmbedder

    monkeypatch.setenv("FAKE_KEY", "k")
    other = LitellmEmbedder("openai/fake-embed", api_base=fake_openai.url, api_key_env="FAKE_KEY")
    store = Store.open(f"sqlite:///{tmp_path / 'bind.db'}", dimension=384)
    service = MemoryService(store, other, MemoryConfig(), ["buddy"])
    service.add("buddy", GLOBAL, "User likes Python")
    service.add("buddy", Scope.channel("a"), "Team ships on Tuesdays")
    with store.read() as conn:
        assert vectors.table_dimension(conn, vectors.COARSE) == 64
        assert _bits_match_floats(conn)
    assert service.search(SearchQuery("python", Reach("buddy", everywhere=True), min_relevance=0.0)).hits[
        0
    ].memory.text == ("User likes Python")
    store.close()


def test_upgrading_an_existing_store_fills_the_bit_table(tmp_path: Path) -> None:
    """Migration 0003 derives a bit vector for every vector already stored."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(migrate.migrations_dir()))
    cfg.attributes["embedding_dimension"] = 384
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    vecs = _unit(300, seed=5)
    with engine.begin() as conn:
        assert vectors.table_dimension(conn, vectors.COARSE) is None
        conn.exec_driver_sql(
            f"INSERT INTO {vectors.TABLE}(rowid, persona, scope, embedding) VALUES (?, ?, ?, ?)",
            [(i + 1, "p", "global", v.tobytes()) for i, v in enumerate(vecs)],
        )
    engine.dispose()
    store = Store.open(url)
    with store.read() as conn:
        assert _ids(conn, vectors.COARSE) == set(range(1, 301))
        assert _bits_match_floats(conn)
        assert vectors.nearest(conn, vecs[41], "p", (), 1)[0][0] == 42
    store.close()


# -- PostgreSQL: pgvector ----------------------------------------------------------------------


def test_postgresql_persona_wide_search_through_hnsw_keeps_to_its_persona(postgres: PostgresDatabases) -> None:
    """Past the exact limit a persona-wide search walks the HNSW graph (iterative scan, filtered by
    persona): the nearest vectors, k of them, none of another persona; scoped searches stay exact."""
    vecs = _unit(1200, seed=11)
    store = Store.open(postgres.fresh(), dimension=384)
    index = store.vectors
    assert isinstance(index, PgVectors)
    rows = [(i + 1, ("p", "q")[i % 2], f"channel:c{i % 7}", v) for i, v in enumerate(vecs)]
    with store.write() as conn:
        index.insert(conn, rows)
        index.delete(conn, 5)
    noise = np.random.default_rng(2).normal(0, 0.01, 384).astype(np.float32)
    with store.read() as conn:
        for target in (1, 3, 601, 1199):
            query = vecs[target - 1] + noise
            approx = index.nearest(conn, query, "p", (), 20, exact_limit=0)
            exact = index.nearest(conn, query, "p", (), 20, exact=True)
            assert approx[0][0] == exact[0][0] == target
            assert len(approx) == 20
            assert all(mid % 2 == 1 and mid != 5 for mid, _ in approx)
            assert len({m for m, _ in approx} & {m for m, _ in exact}) >= 18
            scoped = index.nearest(conn, query, "p", ["channel:c1", "channel:c4"], 5)
            members = {i + 1 for i in range(len(vecs)) if i % 2 == 0 and i % 7 in (1, 4)}
            assert {m for m, _ in scoped} <= members
            assert len(scoped) == 5
    store.close()


def _hnsw_used(conn: sa.Connection, query: np.ndarray) -> bool:
    """Whether the HNSW graph exists, is valid, and answers a nearest-neighbour query when a scan
    of the table is ruled out (at this test's size the planner prefers the reach's btree)."""
    valid = conn.exec_driver_sql(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('memory_vectors_hnsw')"
    ).scalar()
    conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
    plan = conn.exec_driver_sql(
        "EXPLAIN SELECT memory_id FROM memory_vectors ORDER BY embedding <=> %s LIMIT 10", (query,)
    ).all()
    conn.exec_driver_sql("RESET enable_seqscan")
    return bool(valid) and any("memory_vectors_hnsw" in str(line[0]) for line in plan)


def test_a_bulk_fill_on_postgresql_leaves_rows_vectors_and_words_consistent_and_searchable(
    postgres: PostgresDatabases, embedder: LocalEmbedder
) -> None:
    """``testkit.bulk``: memories added in one transaction while the HNSW graph is dropped, then built
    once over every vector: each memory has its row, vector and words; duplicates are found as
    such; scoped and persona-wide searches (the latter through the graph) find what was added;
    a failed fill leaves the store and its graph as they were."""
    store = Store.open(postgres.fresh(), dimension=384)
    service = MemoryService(store, embedder, MemoryConfig(), personas=["p", "q"])
    facts = [
        ("channel:c1", "The user writes Go microservices at work"),
        ("channel:c2", "The user's sister lives in Lisbon"),
        ("global", "The team deploys on Fridays only after the review"),
    ]
    ((before, _),) = service.add_many([NewMemory("p", Scope.parse("channel:c1"), "fact", facts[0][1])])
    # Filler: hand-made unit vectors far enough from the facts' to leave them nearest.
    filler = _unit(1500, seed=3)
    items = [NewMemory(("p", "q")[i % 2], Scope.channel(f"c{i % 5}"), "fact", f"filler {i}") for i in range(1500)]
    items += [NewMemory("p", Scope.parse(scope), "fact", text) for scope, text in facts]
    items.append(NewMemory("p", Scope.parse(facts[1][0]), "fact", facts[1][1]))  # repeated within the fill
    vecs = np.vstack([filler, embedder.embed([t for _, t in facts]), embedder.embed([facts[1][1]])])
    with bulk(store) as conn:
        placed = store.memories.add(conn, items[:700], vecs[:700])
        placed += store.memories.add(conn, items[700:], vecs[700:])
    ids = [mid for mid, _ in placed]
    assert [created for _, created in placed] == [True] * 1500 + [False, True, True, False]
    assert ids[1500] == before
    assert ids[-1] == ids[1501]
    assert ids[:1500] == sorted(ids[:1500])
    assert len(set(ids)) == len(ids) - 1
    with store.read() as conn:
        assert store.memories.count(conn) == store.vectors.count(conn) == store.words.count(conn) == 1503
        assert store.vectors.missing(conn) == []
        stored = {m: (p, s, v) for m, p, s, v in store.vectors.fetch(conn, ids)}
        assert {m: (p, s) for m, (p, s, _) in stored.items()} == {
            m: (item.persona, str(item.scope)) for m, item in zip(ids, items, strict=True)
        }
        assert all(np.allclose(stored[m][2], vecs[i], atol=1e-6) for i, (m, _) in enumerate(placed) if _)
        query = embedder.embed_queries(["Which language does the user write at work?"])[0]
        assert _hnsw_used(conn, query)
        wide = store.vectors.nearest(conn, query, "p", (), 10, exact_limit=0)
        exact = store.vectors.nearest(conn, query, "p", (), 10, exact=True)
        assert wide[0][0] == exact[0][0] == before
        assert len({m for m, _ in wide} & {m for m, _ in exact}) >= 9
        assert [m for m, _ in store.words.search(conn, ["lisbon"], "p", ["channel:c2"], 5)] == [ids[1501]]
        assert [m for m, _ in store.words.search(conn, ["filler"], "q", [], 2000)] == ids[1:1500:2]
        assert store.words.search(conn, ["lisbon"], "p", ["channel:c1"], 5) == []
    scoped = service.search(
        SearchQuery("Where does the user's sister live?", Reach("p", channel="c2"), limit=3, min_relevance=0.0)
    ).hits
    assert scoped[0].memory.id == ids[1501]
    assert {str(h.memory.scope) for h in scoped} <= {"global", "channel:c2"}
    everywhere = service.search(
        SearchQuery("When does the team deploy?", Reach("p", everywhere=True), limit=3, min_relevance=0.0)
    ).hits
    assert everywhere[0].memory.id == ids[1502]
    assert {h.memory.persona for h in everywhere} == {"p"}

    class Interrupted(RuntimeError):
        pass

    def fill_and_fail() -> None:
        with bulk(store) as conn:
            store.memories.add(conn, [NewMemory("p", GLOBAL, "fact", "never kept")], embedder.embed(["never kept"]))
            raise Interrupted

    with pytest.raises(Interrupted):
        fill_and_fail()
    with store.read() as conn:
        assert store.memories.count(conn) == store.vectors.count(conn) == store.words.count(conn) == 1503
        assert _hnsw_used(conn, query)
    store.close()
