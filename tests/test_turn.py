"""One turn pipeline: the budget preview shows what the real turn then uses, and opting out of
memory opts out of every kind of recall."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.access.scopes import Scope
from agentd.app import App
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from agentd.runtime import Done, Event, HistoryContext, MemoryContext, Runtime
from agentd.runtime.pipeline.record import ContextRecord
from tests.conftest import write_home

OFFLINE = """
name = "buddy"
model = "offline"
max_reply_tokens = 128
context_window = 1024
skills = ["remember", "recall"]
system_prompt = "You are buddy."
"""

PYTHON = "Alice is learning about Python generators and decorators"
EARLIER = "I am reading a book about Python generators this week"
FILLER = "The river valley weather stayed mild while farmers repaired fences near the old mill. " * 6


@pytest.fixture
def make_runtime(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[Any]:
    """A Runtime on an App with the offline persona ``buddy``; ``config`` is extra TOML."""
    made: list[tuple[App, Runtime]] = []

    def build(config: str = "") -> Runtime:
        home = write_home(tmp_path / f"home{len(made)}", config, {"buddy": OFFLINE})
        app = App(load_config(home, environ={}), embedder=embedder)
        rt = Runtime(app)
        made.append((app, rt))
        return rt

    yield build
    for app, rt in made:
        rt.stop(grace=5)
        app.close()


def say(rt: Runtime, text: str, user: str = "alice", **kw: Any) -> list[Event]:
    return list(rt.chat("buddy", "general", user, text, **kw))


def stored_record(rt: Runtime, events: list[Event]) -> ContextRecord:
    done = events[-1]
    assert isinstance(done, Done), done
    app: App = rt._app  # noqa: SLF001 - the test reads the record the runtime stored
    with app.store.read() as conn:
        row = app.store.contexts.for_message(conn, done.message_id)
    assert row is not None
    return ContextRecord.from_json(row.data)


def channel_with_history(rt: Runtime) -> None:
    """A user memory learned in this (shared) channel, an earlier exchange about it, and enough chatter
    to push it out of the window."""
    learned = say(rt, EARLIER)[-1]
    assert isinstance(learned, Done)
    rt._app.memory.add(  # noqa: SLF001
        "buddy", Scope.user("alice"), PYTHON, "preference", source_message_id=learned.user_message_id
    )
    for _ in range(6):
        say(rt, FILLER)
    say(rt, "one more thing about generators", user="bob")
    say(rt, "and Python decorators too?")


def test_the_budget_preview_is_what_the_real_turn_then_uses(make_runtime) -> None:
    rt = make_runtime("[history]\nrecent_window = 0\n")
    channel_with_history(rt)
    message = "What should I learn next about Python generators?"
    preview = rt.preview("buddy", "general", "alice", message)
    events = say(rt, message)
    record = stored_record(rt, events)
    # The same query (alice's burst since the last reply, not bob's message), the same recall,
    # the same accounting to the token.
    assert record.retrieval.query == preview.query == message
    assert [m.id for m in record.memories] == [h.memory.id for h in preview.context.memories]
    assert record.memories
    assert record.memories[0].text == PYTHON
    assert record.user_history.message_ids == tuple(i for s in preview.context.user_history for i in s.message_ids)
    assert record.user_history.message_ids, "the earlier exchange about generators was recalled"
    assert record.budget == preview.context.budget


def test_a_preview_without_a_message_queries_with_the_users_last_burst(make_runtime) -> None:
    rt = make_runtime()
    rt._app.memory.add("buddy", Scope.user("alice"), PYTHON, "preference")  # noqa: SLF001
    say(rt, "hello there")
    say(rt, "tell me about snakes", user="bob")
    assert rt.preview("buddy", "general", "alice", None).query == "hello there"
    assert rt.preview("buddy", "general", "bob", None).query == "tell me about snakes"
    assert rt.preview("buddy", "general", None, None).query == "tell me about snakes"
    assert rt.preview("buddy", "general", "carol", None).query == ""


def events_of(events: list[Event]) -> tuple[MemoryContext, HistoryContext]:
    (memory,) = [e for e in events if isinstance(e, MemoryContext)]
    (history,) = [e for e in events if isinstance(e, HistoryContext)]
    return memory, history


@pytest.mark.parametrize(
    ("config", "per_request"),
    [
        ("[history]\nrecent_window = 0\n", True),
        ("[history]\nrecent_window = 0\n[memory]\nauto_retrieve = false\n", False),
    ],
    ids=["disable_memory", "auto_retrieve-false"],
)
def test_opting_out_of_memory_recalls_neither_memories_nor_earlier_exchanges(
    make_runtime, config: str, per_request: bool
) -> None:
    rt = make_runtime(config)
    channel_with_history(rt)
    events = say(rt, "What should I learn next about Python generators?", disable_memory=per_request)
    memory, history = events_of(events)
    assert (memory.status, memory.memories) == ("disabled", ())
    assert (history.status, history.snippets, history.seeds) == ("disabled", (), ())
    record = stored_record(rt, events)
    assert record.memories == ()
    assert record.user_history.message_ids == ()
    assert record.user_history.seeds == ()
    assert record.budget.memory_tokens == 0
    assert record.budget.user_history_tokens == 0
    # Nothing recalled reached the model either: the offline model says what it was given.
    done = events[-1]
    assert isinstance(done, Done)
    assert "no stored memories" in done.text
    assert "talked about this before" not in done.text


def test_history_off_turns_off_earlier_exchanges_alone(make_runtime) -> None:
    rt = make_runtime("[history]\nrecent_window = 0\nenabled = false\n")
    channel_with_history(rt)
    memory, history = events_of(say(rt, "What should I learn next about Python generators?"))
    assert [m.text for m in memory.memories] == [PYTHON]
    assert memory.status == "ok"
    assert history.status == "disabled"
    assert history.snippets == ()
