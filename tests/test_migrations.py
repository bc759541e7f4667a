"""Upgrading a store that older agentd releases wrote: every migration keeps every memory."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from agentd.access.scopes import GLOBAL, Reach
from agentd.config import MemoryConfig
from agentd.embedders.local import LocalEmbedder
from agentd.memory import MemoryService
from agentd.search import SearchQuery
from agentd.search.engine import with_mode
from agentd.store import Store, migrate
from agentd.store.engine import create_engine
from tests.conftest import REPO, PostgresDatabases, newest_migration


def test_a_store_at_the_first_revision_upgrades_with_its_memories_searchable(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """Memories without metadata (SQL NULL or JSON 'null') and with a context all survive 0002 and 0003."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    assert migrate.upgrade(engine, embedder.dimension, target="0001") == (None, "0001")
    rows = [
        (1, "User likes Python", None),
        (2, "User's dog is named Max", "null"),
        (3, "In Reykjavik!", json.dumps({"context": "Where did you spend the winter holidays?"})),
    ]
    vectors = embedder.embed([text for _, text, _ in rows])
    with engine.begin() as conn:
        for (mid, text, metadata), vec in zip(rows, vectors, strict=True):
            conn.exec_driver_sql(
                "INSERT INTO memories (id, persona, scope, category, text, content_hash, metadata, created_at) "
                "VALUES (?, 'buddy', 'global', 'fact', ?, ?, ?, '2026-01-01 00:00:00.000000')",
                (mid, text, f"hash{mid}", metadata),
            )
            conn.exec_driver_sql(
                "INSERT INTO memory_vectors (rowid, persona, scope, embedding) VALUES (?, 'buddy', 'global', ?)",
                (mid, vec.tobytes()),
            )
    engine.dispose()

    store = Store.open(url, dimension=embedder.dimension)
    try:
        with store.read() as conn:
            assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one() == newest_migration()
        service = MemoryService(store, embedder, MemoryConfig(), personas=["buddy"], check_embedding=False)
        reach = Reach("buddy", channel=None, user=None)
        assert reach.scopes() == (GLOBAL,)
        found = {
            h.memory.id
            for h in with_mode(service.searcher, "lexical")
            .search(SearchQuery("dog Max", reach, limit=3, min_relevance=0.0))
            .hits
        }
        assert 2 in found
        by_context = (
            with_mode(service.searcher, "lexical")
            .search(SearchQuery("winter holidays", reach, limit=1, min_relevance=0.0))
            .hits
        )
        assert [h.memory.id for h in by_context] == [3]
        best = (
            with_mode(service.searcher, "dense")
            .search(SearchQuery("What programming language should I learn?", reach, limit=1))
            .hits
        )
        assert [h.memory.text for h in best] == ["User likes Python"]
    finally:
        store.close()


def test_a_postgresql_store_at_the_first_revision_upgrades_with_its_memories_searchable(
    postgres: PostgresDatabases, embedder: LocalEmbedder
) -> None:
    """Rows written at 0001 with that revision's own DDL stay searchable at the newest revision."""
    url = postgres.fresh(migrated=False)
    engine = create_engine(url)
    assert migrate.upgrade(engine, embedder.dimension, target="0001") == (None, "0001")
    texts = ["User likes Python", "User's dog is named Max"]
    vectors = embedder.embed(texts)
    with engine.begin() as conn:
        for mid, (text, vec) in enumerate(zip(texts, vectors, strict=True), start=1):
            conn.exec_driver_sql(
                "INSERT INTO memories (id, persona, scope, category, text, content_hash, metadata, created_at) "
                "VALUES (%s, 'buddy', 'global', 'fact', %s, %s, NULL, '2026-01-01 00:00:00')",
                (mid, text, f"hash{mid}"),
            )
            conn.exec_driver_sql(
                "INSERT INTO memory_vectors (memory_id, persona, scope, embedding) "
                "VALUES (%s, 'buddy', 'global', %s::vector)",
                (mid, "[" + ",".join(str(float(x)) for x in vec) + "]"),
            )
        conn.exec_driver_sql("SELECT setval(pg_get_serial_sequence('memories', 'id'), 2)")
    engine.dispose()

    store = Store.open(url, dimension=embedder.dimension)
    try:
        with store.read() as conn:
            assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one() == newest_migration()
        service = MemoryService(store, embedder, MemoryConfig(), personas=["buddy"], check_embedding=False)
        reach = Reach("buddy", channel=None, user=None)
        best = (
            with_mode(service.searcher, "dense")
            .search(SearchQuery("What programming language should I learn?", reach, limit=1))
            .hits
        )
        assert [h.memory.text for h in best] == ["User likes Python"]
        # New memories get ids after the old ones, and words as the current code writes them.
        added, _ = service.add("buddy", GLOBAL, "The dog Max sleeps in the garden")
        assert added.id == 3
        found = (
            with_mode(service.searcher, "lexical")
            .search(SearchQuery("dog Max", reach, limit=3, min_relevance=0.0))
            .hits
        )
        assert [h.memory.id for h in found] == [3]
    finally:
        store.close()


def test_the_revisions_import_no_application_code() -> None:
    """Frozen history: a revision holds its own DDL; it never imports agentd."""
    for path in sorted((REPO / "migrations" / "versions").glob("[0-9]*_*.py")):
        tree = ast.parse(path.read_text())
        imported = [
            alias.name if isinstance(node, ast.Import) else node.module or ""
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in (node.names if isinstance(node, ast.Import) else [None])  # type: ignore[list-item]
        ]
        assert not [m for m in imported if m.split(".")[0] == "agentd"], path.name
