"""Upgrading a store that older agentd releases wrote: every migration keeps every memory."""

from __future__ import annotations

import json
from pathlib import Path

from agentd.config import MemoryConfig
from agentd.embedders.local import LocalEmbedder
from agentd.memory import MemoryService
from agentd.scopes import GLOBAL, Reach
from agentd.store import Store, migrate
from agentd.store.engine import create_engine
from tests.conftest import newest_migration


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
        found = {h.memory.id for h in service.search("dog Max", reach, limit=3, min_relevance=0.0, mode="lexical")}
        assert 2 in found
        by_context = service.search("winter holidays", reach, limit=1, min_relevance=0.0, mode="lexical")
        assert [h.memory.id for h in by_context] == [3]
        best = service.search("What programming language should I learn?", reach, limit=1, mode="dense")
        assert [h.memory.text for h in best] == ["User likes Python"]
    finally:
        store.close()
