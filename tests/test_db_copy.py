"""``agentd db copy``: a SQLite store into PostgreSQL and back, through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.config import MemoryConfig
from agentd.embedders.local import LocalEmbedder
from agentd.memory import MemoryService
from agentd.search import SearchQuery
from agentd.store import Store
from tests.conftest import agentd_cli
from tests.support.pgserver import PostgresDatabases

QUERIES = ["Where did Maria propose?", "What programming language should I learn?", "dog Max"]


def _fill(store: Store, embedder: LocalEmbedder) -> MemoryService:
    service = MemoryService(store, embedder, MemoryConfig(), personas=["buddy"])
    service.add("buddy", GLOBAL, "User likes Python", "preference")
    service.add("buddy", Scope.user("al"), "User's dog is named Max")
    service.add(
        "buddy",
        Scope.channel("general"),
        "Maria: In Reykjavik, at the harbour!",
        metadata={"context": "John: Where did you propose to your partner?"},
    )
    gone, _ = service.add("buddy", GLOBAL, "A memory forgotten before the copy")
    service.forget(gone.id)
    with store.write() as conn:
        asked = store.messages.add(conn, channel="general", role="user", author="al", content="hi", status="answered")
        reply = store.messages.add(
            conn,
            channel="general",
            role="assistant",
            author="buddy",
            content="hello",
            status="complete",
            persona="buddy",
            reply_to=asked.id,
        )
        store.contexts.add(
            conn,
            reply_id=reply.id,
            user_message_id=asked.id,
            persona="buddy",
            channel="general",
            model="offline",
            data={"memories": []},
        )
    return service


def _answers(service: MemoryService) -> list[list[tuple[int, str]]]:
    reach = Reach("buddy", channel="general", user="al")
    return [
        [(h.memory.id, h.memory.text) for h in service.search(SearchQuery(q, reach, min_relevance=0.0)).hits]
        for q in QUERIES
    ]


def test_copy_sqlite_to_postgresql_and_back_keeps_everything_searchable(
    tmp_path: Path, postgres: PostgresDatabases, embedder: LocalEmbedder
) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'src.db'}"
    store = Store.open(sqlite_url, dimension=embedder.dimension)
    expected = _answers(_fill(store, embedder))
    store.close()
    pg_url = postgres.fresh(migrated=False)

    result = agentd_cli("db", "copy", sqlite_url, pg_url, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["matches"] is True
    assert report["source"] == {
        "channels": 1,
        "messages": 2,
        "memories": 3,
        "context_records": 1,
        "job_cursors": 0,
        "memory_history": 0,
        "vectors": 3,
        "words": 3,
        "embedding_space": 1,
        "api_keys": 0,
    }
    assert "copying" in result.stderr  # the progress bar

    copied = Store.open(pg_url, dimension=embedder.dimension)
    try:
        service = MemoryService(copied, embedder, MemoryConfig(), personas=["buddy"])
        assert _answers(service) == expected
        with copied.read() as conn:
            assert copied.contexts.for_message(conn, 1) is not None
            assert copied.messages.get(conn, 2).reply_to == 1  # type: ignore[union-attr]
        new, _ = service.add("buddy", GLOBAL, "A memory written after the copy")
        assert new.id == 4  # ids continue after the copied ones (the forgotten 4 is free, as on SQLite)
        service.forget(new.id)
    finally:
        copied.close()

    back_url = f"sqlite:///{tmp_path / 'back.db'}"
    again = agentd_cli("db", "copy", pg_url, back_url)
    assert again.returncode == 0, again.stderr
    assert "memories" in again.stdout
    assert "MISMATCH" not in again.stdout
    back = Store.open(back_url, dimension=embedder.dimension)
    try:
        assert _answers(MemoryService(back, embedder, MemoryConfig(), personas=["buddy"])) == expected
    finally:
        back.close()

    refused = agentd_cli("db", "copy", sqlite_url, back_url)
    assert refused.returncode == 1
    assert "not empty" in refused.stderr
