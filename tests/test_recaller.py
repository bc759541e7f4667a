"""The recall entry point a turn calls: one request in, one ``Recalled`` out (earlier exchanges,
memories, near misses, the profile, statuses and times), on a real SQLite store with the local
embedder."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.app import App
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from agentd.recall import Recaller, RecallRequest, RecallStatus
from agentd.recall.retrieval import Retriever
from tests.conftest import write_home

PERSONA = """
name = "buddy"
model = "offline"
max_reply_tokens = 128
context_window = 1024
skills = []
system_prompt = "You are buddy."
"""

CONFIG = "[history]\nrecent_window = 0\n[memory]\nprofile_tokens = 200\n"


@pytest.fixture
def app(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[App]:
    home = write_home(tmp_path / "home", CONFIG, {"buddy": PERSONA})
    made = App(load_config(home, environ={}), embedder=embedder)
    yield made
    made.close()


@pytest.fixture
def recaller(app: App) -> Iterator[Recaller]:
    with ThreadPoolExecutor(1) as pool:
        retriever = Retriever(app.memory, 30.0, pool)
        yield Recaller(app.config, app.store, retriever, app.memory)


def post(app: App, content: str, role: str = "user", author: str = "alice") -> int:
    with app.store.write() as conn:
        message = app.store.messages.add(
            conn, channel="c", role=role, author=author, persona="buddy", content=content, status="answered"
        )
        return message.id


def seed(app: App) -> int:
    """An earlier exchange about Kyoto, a global memory about it, a profile memory; the current message's id."""
    post(app, "I am planning a trip to Kyoto to see the Zen temples")
    post(app, "Kyoto's Zen temples are quietest early in the morning.", role="assistant", author="buddy")
    app.memory.add("buddy", GLOBAL, "Ryoan-ji is a Zen temple in Kyoto with a famous rock garden")
    app.memory.add("buddy", Scope.user("alice"), "Alice prefers answers in short bullet points", "preference")
    return post(app, "which Zen temples in Kyoto?")


def test_one_call_recalls_earlier_exchanges_memories_and_the_profile(app: App, recaller: Recaller) -> None:
    current = seed(app)
    reach = Reach("buddy", "c", "alice")
    recalled = recaller.recall(RecallRequest("which Zen temples in Kyoto?", "c", "alice", reach, before_id=current))
    assert recalled.earlier_status is RecallStatus.OK
    assert [e.user_text for e in recalled.earlier.exchanges] == ["I am planning a trip to Kyoto to see the Zen temples"]
    assert recalled.status is RecallStatus.OK
    assert [h.memory.text for h in recalled.retrieval.hits][:1] == [
        "Ryoan-ji is a Zen temple in Kyoto with a famous rock garden"
    ]
    assert [m.text for m in recalled.profile] == ["Alice prefers answers in short bullet points"]
    assert recalled.times.retrieval_ms > 0


def test_turned_off_nothing_is_recalled_and_both_statuses_say_so(app: App, recaller: Recaller) -> None:
    current = seed(app)
    reach = Reach("buddy", "c", "alice")
    request = RecallRequest("which Zen temples in Kyoto?", "c", "alice", reach, enabled=False, before_id=current)
    recalled = recaller.recall(request)
    assert recalled.earlier_status is RecallStatus.DISABLED
    assert recalled.status is RecallStatus.DISABLED
    assert recalled.earlier.exchanges == ()
    assert recalled.retrieval.hits == ()
    assert recalled.profile == ()


def test_a_sparse_query_is_seeded_by_the_earlier_exchange(app: App, recaller: Recaller) -> None:
    current = seed(app)
    recalled = recaller.recall(
        RecallRequest("Kyoto again?", "c", "alice", Reach("buddy", "c", "alice"), before_id=current)
    )
    assert recalled.query.startswith("Kyoto again? ")
    assert "temples" in recalled.query.split()


def test_what_the_transcript_carries_is_not_recalled_again(app: App, recaller: Recaller) -> None:
    current = seed(app)
    reach = Reach("buddy", "c", "alice")
    # The transcript carries every message from the first one: nothing earlier is left to recall.
    request = RecallRequest("which Zen temples in Kyoto?", "c", "alice", reach, before_id=current, transcript_from=1)
    recalled = recaller.recall(request)
    assert recalled.earlier.exchanges == ()
    assert recalled.earlier.seeds  # it still gives seeds


def test_without_an_embedder_memories_are_unavailable_and_earlier_exchanges_still_found(
    tmp_path: Path,
) -> None:
    home = write_home(tmp_path / "bare", CONFIG + '[embedding]\nprovider = "none"\n', {"buddy": PERSONA})
    bare = App(load_config(home, environ={}))
    try:
        current = seed_messages_only(bare)
        with ThreadPoolExecutor(1) as pool:
            recaller = Recaller(bare.config, bare.store, Retriever(None, 30.0, pool), bare.memory)
            reach = Reach("buddy", "c", "alice")
            recalled = recaller.recall(
                RecallRequest("which Zen temples in Kyoto?", "c", "alice", reach, before_id=current)
            )
    finally:
        bare.close()
    assert recalled.status is RecallStatus.UNAVAILABLE
    assert recalled.earlier_status is RecallStatus.OK
    assert len(recalled.earlier.exchanges) == 1


def seed_messages_only(app: App) -> int:
    post(app, "I am planning a trip to Kyoto to see the Zen temples")
    post(app, "Kyoto's Zen temples are quietest early in the morning.", role="assistant", author="buddy")
    return post(app, "which Zen temples in Kyoto?")
