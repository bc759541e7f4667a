"""The actor runtime through its public API, with litellm talking to a fake OpenAI server.

Automatic retrieval and recall-skill cases assert on what the
model actually received: the fake server records every request.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentd.access.scopes import GLOBAL, Scope
from agentd.app import App
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from agentd.llm.chat import ChatModel, LitellmChat, ModelSettings, ModelTurn
from agentd.runtime import Done, Error, Event, MemoryContext, Runtime, TokenDelta, ToolCall, ToolResult
from tests.conftest import write_home
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, embedding_config, fake_persona


@pytest.fixture
def make_app(
    tmp_path: Path, fake_openai: FakeOpenAI, embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """Build an App whose personas talk to the fake server; ``config`` is extra TOML."""
    monkeypatch.setenv(KEY_ENV, "test-key")
    apps: list[App] = []

    def build(config: str = "", personas: dict[str, str] | None = None, local_embedder: bool = True) -> App:
        home = write_home(tmp_path / f"home{len(apps)}", config, personas or {"fake": fake_persona(fake_openai.url)})
        cfg = load_config(home, environ={})
        app = App(cfg, embedder=embedder) if local_embedder and cfg.embedding.provider == "local" else App(cfg)
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.close()


@pytest.fixture
def runtimes() -> Iterator[Any]:
    made: list[Runtime] = []

    def start(app: App, llm: ChatModel | None = None) -> Runtime:
        rt = Runtime(app, llm)
        made.append(rt)
        return rt

    yield start
    for rt in made:
        rt.stop(grace=5)


def run(
    rt: Runtime, text: str, persona: str = "fake", channel: str = "general", user: str = "alice", **kw: Any
) -> list[Event]:
    return list(rt.chat(persona, channel, user, text, **kw))


def system_prompt(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


# -- automatic retrieval --------------------------------------------------------------------------


def test_a_related_memory_is_retrieved_and_injected_into_the_system_prompt(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    app.memory.add("fake", GLOBAL, "User likes Python", "preference")
    events = run(runtimes(app), "What programming language should I learn?")
    (memory_context,) = [e for e in events if isinstance(e, MemoryContext)]
    assert [m.text for m in memory_context.memories] == ["User likes Python"]
    assert memory_context.memories[0].category == "preference"
    assert memory_context.memories[0].score >= 0.5
    sent = system_prompt(fake_openai.chat_requests()[-1])
    assert "## Recalled Memories" in sent
    assert '- "User likes Python" (preference, relevance: ' in sent
    assert isinstance(events[-1], Done)


def test_memory_context_comes_first_before_any_token_delta(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    app.memory.add("fake", GLOBAL, "User likes Python", "preference")
    fake_openai.queue(Turn(text="Python is a fine first language."))
    events = run(runtimes(app), "What programming language should I learn?")
    types = [e.type for e in events]
    assert types[0] == "memory_context"
    assert types.index("memory_context") < types.index("token_delta")
    assert "".join(e.text for e in events if isinstance(e, TokenDelta)) == "Python is a fine first language."
    assert types[-1] == "done"


def test_a_memory_below_the_threshold_is_not_injected(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    app.memory.add("fake", GLOBAL, "User's dog is named Max")
    events = run(runtimes(app), "Explain quantum entanglement")
    assert events[0] == MemoryContext((), "ok", events[0].user_message_id)
    assert "Recalled Memories" not in system_prompt(fake_openai.chat_requests()[-1])
    assert isinstance(events[-1], Done)


def test_disable_memory_per_request_makes_no_embedding_call(make_app, runtimes, fake_openai) -> None:
    # Episodic indexing (its own embedding calls, after the reply) is off: this counts retrieval's.
    app = make_app(embedding_config(fake_openai) + "\n[episodes]\nenabled = false\n")
    rt = runtimes(app)
    before = len(fake_openai.embedding_requests())
    run(rt, "tell me about my friend there")  # retrieval on: one embedding call
    assert len(fake_openai.embedding_requests()) == before + 1
    events = run(rt, "hello again", disable_memory=True)
    assert events[0].status == "disabled"
    assert events[0].memories == ()
    assert len(fake_openai.embedding_requests()) == before + 1
    assert isinstance(events[-1], Done)


def test_a_greeting_is_never_embedded_as_a_query_even_with_episodes_searched(make_app, runtimes, fake_openai) -> None:
    # Episodes on (the default): memories and episodes share one query vector, made only for a topic.
    app = make_app(embedding_config(fake_openai))
    rt = runtimes(app)
    assert isinstance(run(rt, "hello there!")[-1], Done)
    assert isinstance(run(rt, "tell me about my friend there")[-1], Done)
    queries = [r["input"] for r in fake_openai.embedding_requests()]
    assert ["hello there!"] not in queries
    assert "hello there!" not in queries
    assert sum(q in (["tell me about my friend there"], "tell me about my friend there") for q in queries) == 1


def test_auto_retrieve_false_makes_no_embedding_call(make_app, runtimes, fake_openai) -> None:
    app = make_app(embedding_config(fake_openai) + "\n[memory]\nauto_retrieve = false\n[episodes]\nenabled = false\n")
    app.memory.add("fake", GLOBAL, "hello there friend")
    before = len(fake_openai.embedding_requests())
    events = run(runtimes(app), "hello there")
    assert events[0].status == "disabled"
    assert len(fake_openai.embedding_requests()) == before
    assert "Recalled Memories" not in system_prompt(fake_openai.chat_requests()[-1])


def test_without_an_embedder_chat_works_with_no_retrieval_and_no_memory_tools(make_app, runtimes, fake_openai) -> None:
    app = make_app('[embedding]\nprovider = "none"\n')
    events = run(runtimes(app), "What programming language should I learn?")
    assert events[0].status == "unavailable"
    assert not any(isinstance(e, Error) for e in events)
    assert isinstance(events[-1], Done)
    assert "tools" not in fake_openai.chat_requests()[-1]


def test_an_empty_store_changes_nothing_in_the_prompt(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    events = run(runtimes(app), "What programming language should I learn?")
    assert events[0].memories == ()
    assert events[0].status == "ok"
    request = fake_openai.chat_requests()[-1]
    assert system_prompt(request) == "You are fake, a test persona."
    assert request["messages"][-1] == {"role": "user", "content": "What programming language should I learn?"}


def test_a_slow_embedder_past_the_timeout_still_gets_a_reply_without_memories(make_app, runtimes, fake_openai) -> None:
    app = make_app(embedding_config(fake_openai) + "\n[memory]\nretrieval_timeout_seconds = 0.3\n")
    app.memory.add("fake", GLOBAL, "hello there friend")
    fake_openai.embedding_delay = 1.5
    events = run(runtimes(app), "tell me about my friend there")
    assert events[0].status == "timeout"
    assert events[0].memories == ()
    assert not any(isinstance(e, Error) for e in events)
    assert isinstance(events[-1], Done)
    assert "Recalled Memories" not in system_prompt(fake_openai.chat_requests()[-1])


def test_an_embedder_error_is_not_an_error_for_the_user(make_app, runtimes, fake_openai) -> None:
    """The embedding server goes away after start: the reply goes on, without memories."""
    chat_server = FakeOpenAI().start()
    try:
        # A generous timeout, so a loaded machine cannot turn the error into a timeout.
        app = make_app(
            embedding_config(fake_openai) + "\n[memory]\nretrieval_timeout_seconds = 60.0\n",
            personas={"fake": fake_persona(chat_server.url)},
        )
        rt = runtimes(app)
        app.memory.add("fake", GLOBAL, "hello there friend")
        fake_openai.stop()
        events = run(rt, "tell me about my friend there")
        assert events[0].status == "error"
        assert events[0].memories == ()
        assert not any(isinstance(e, Error) for e in events)
        assert isinstance(events[-1], Done)
    finally:
        chat_server.stop()


# -- events, errors, offline model -------------------------------------------------------------------------


def test_events_have_a_json_form_with_their_type(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    app.memory.add("fake", GLOBAL, "User likes Python", "preference")
    events = run(runtimes(app), "What programming language should I learn?")
    as_json = [json.loads(json.dumps(e.as_json())) for e in events]
    assert as_json[0]["type"] == "memory_context"
    assert set(as_json[0]["memories"][0]) >= {"text", "category", "score"}
    done = as_json[-1]
    assert done["type"] == "done"
    assert done["message_id"] > done["user_message_id"]
    assert done["usage"]["total_tokens"] > 0
    assert done["budget"]["memories_included"] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        events[0].status = "x"  # type: ignore[misc]


def test_an_llm_error_ends_the_turn_with_error_and_the_message_stays(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    # A 500 is transient: tried again ([models] retries = 2); after the last try the turn fails.
    fake_openai.queue(Turn(status=500), Turn(status=500), Turn(status=500))
    events = run(runtimes(app), "this will fail")
    error = events[-1]
    assert isinstance(error, Error)
    assert error.code == "llm_http_error"
    assert len(fake_openai.chat_requests()) == 3
    assert not any(isinstance(e, Done) for e in events)
    with app.store.read() as conn:
        msg = app.store.messages.get(conn, error.user_message_id)
    assert msg is not None
    assert msg.content == "this will fail"
    assert msg.status == "failed"


def test_a_real_model_without_credentials_names_the_missing_variable(make_app, runtimes, monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    app = make_app(
        personas={"claude": 'name = "claude"\nmodel = "anthropic/claude-sonnet-4-5"\nsystem_prompt = "hi"\n'}
    )
    events = run(runtimes(app), "hello", persona="claude")
    assert isinstance(events[-1], Error)
    assert events[-1].code == "llm_auth"
    assert "ANTHROPIC_API_KEY" in events[-1].message


def test_the_offline_model_shows_what_it_was_given_and_remembers_when_asked(make_app, runtimes) -> None:
    offline = 'name = "buddy"\nmodel = "offline"\nskills = ["remember", "recall"]\nsystem_prompt = "You are buddy."\n'
    app = make_app(personas={"buddy": offline})
    rt = runtimes(app)
    events = run(rt, "Please remember that my favourite language is Python", persona="buddy")
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [c.name for c in calls] == ["remember"]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert results[0].result is not None
    assert results[0].result["stored"] is True
    assert results[0].result["scope"] == "user:alice"
    answer = run(rt, "What programming language should I learn?", persona="buddy")
    text = "".join(e.text for e in answer if isinstance(e, TokenDelta))
    assert "What programming language should I learn?" in text
    assert "favourite language is Python" in text
    again = run(rt, "What programming language should I learn?", persona="buddy")
    assert "".join(e.text for e in again if isinstance(e, TokenDelta)) == text  # deterministic


# -- the recall skill through tool calls ------------------------------------------------------------------


def tool_results(events: Sequence[Event]) -> list[ToolResult]:
    return [e for e in events if isinstance(e, ToolResult)]


def test_a_tool_call_round_trip_stores_and_recalls_a_memory(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    rt = runtimes(app)
    fake_openai.queue(
        Turn(tool_calls=[("remember", {"text": "User's favorite color is blue", "category": "preference"})]),
        Turn(text="Noted."),
        Turn(tool_calls=[("recall", {"query": "what color does the user like"})]),
        Turn(text="Blue."),
    )
    stored = run(rt, "my favorite color is blue, remember it")
    assert tool_results(stored)[0].result["stored"] is True  # type: ignore[index]
    recalled = run(rt, "what is my favorite color?", disable_memory=True)
    result = tool_results(recalled)[0].result
    assert result is not None
    assert result["total_found"] >= 1
    first = result["results"][0]
    assert first["text"] == "User's favorite color is blue"
    assert set(first) == {"text", "category", "score", "created_at"}
    # The tool result went back to the model as a tool message.
    last_request = fake_openai.chat_requests()[-1]
    tool_msgs = [m for m in last_request["messages"] if m["role"] == "tool"]
    assert "User's favorite color is blue" in tool_msgs[-1]["content"]
    assert any(m.get("tool_calls") for m in last_request["messages"] if m["role"] == "assistant")


def test_the_recall_tool_limit_default_empty_store_and_blank_query(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    rt = runtimes(app)
    fake_openai.queue(Turn(tool_calls=[("recall", {"query": "anything"})]), Turn(text="nothing"))
    empty = tool_results(run(rt, "q1", disable_memory=True))[0]
    assert empty.error is None
    assert empty.result == {
        "results": [],
        "total_found": 0,
        "message": "no memories are stored yet",
    }
    for i in range(7):
        app.memory.add("fake", GLOBAL, f"User practised Python programming exercise number {i}")
    fake_openai.queue(
        Turn(tool_calls=[("recall", {"query": "Python programming practice", "limit": 1})]),
        Turn(text="ok"),
        Turn(tool_calls=[("recall", {"query": "Python programming practice"})]),
        Turn(text="ok"),
        Turn(tool_calls=[("recall", {"query": "   "})]),
        Turn(text="ok"),
    )
    one = tool_results(run(rt, "q2", disable_memory=True))[0].result
    assert one is not None
    assert one["total_found"] == 1
    assert len(one["results"]) == 1
    default = tool_results(run(rt, "q3", disable_memory=True))[0].result
    assert default is not None
    assert len(default["results"]) == 5
    scores = [r["score"] for r in default["results"]]
    assert scores == sorted(scores, reverse=True)
    invalid = tool_results(run(rt, "q4", disable_memory=True))[0]
    assert invalid.result is None
    assert invalid.error is not None
    assert invalid.error["code"] == "InvalidInput"


def test_the_recall_tool_ranks_cooking_above_programming_for_food_recipes(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    for text in [
        "User loves cooking Italian pasta dishes",
        "User writes Go microservices at work",
        "User bakes sourdough bread every weekend",
        "User is learning Rust lifetimes",
    ]:
        app.memory.add("fake", Scope.channel("general"), text)
    fake_openai.queue(Turn(tool_calls=[("recall", {"query": "food recipes", "limit": 2})]), Turn(text="ok"))
    result = tool_results(run(runtimes(app), "what do I cook?", disable_memory=True))[0].result
    assert result is not None
    assert {r["text"] for r in result["results"]} == {
        "User loves cooking Italian pasta dishes",
        "User bakes sourdough bread every weekend",
    }


def test_the_memory_tools_definitions_and_no_recall_without_an_embedder(make_app, fake_openai) -> None:
    from agentd import SkillExecutionFailed
    from agentd.memory import MemoryService
    from agentd.skills import RecallSkill, SkillCaller, build_registry

    app = make_app()
    registry = build_registry(app.personas["fake"], app.memory, app.personas)
    names = [d["function"]["name"] for d in registry.tool_definitions()]
    assert names == ["recall", "remember"]
    recall = next(d for d in registry.tool_definitions() if d["function"]["name"] == "recall")
    params = recall["function"]["parameters"]
    assert params["required"] == ["query"]
    assert set(params["properties"]) == {"query", "limit"}
    assert recall["type"] == "function"
    no_embedder = MemoryService(app.store, None, app.config.memory, ["fake"])
    assert build_registry(app.personas["fake"], no_embedder, app.personas).names() == []
    with pytest.raises(SkillExecutionFailed, match="embedding model"):
        RecallSkill(no_embedder).run({"query": "x"}, SkillCaller("fake", "general", "alice"))


# -- the supervisor and actors --------------------------------------------------------------------------------


class Exploding:
    """A chat model that raises a bug (not an agentd error) when the message says 'explode'."""

    def __init__(self) -> None:
        self._real = LitellmChat()

    def stream(
        self,
        settings: ModelSettings,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        on_text: Any,
        should_stop: Any = lambda: False,
    ) -> ModelTurn:
        if "explode" in messages[-1]["content"]:
            raise RuntimeError("kaboom")
        return self._real.stream(settings, messages, tools, on_text, should_stop)


def test_a_crashing_actor_is_restarted_and_the_next_message_is_answered(make_app, runtimes) -> None:
    app = make_app("[runtime]\nrestart_backoff_seconds = 0.05\nmax_restarts = 2\n")
    rt = runtimes(app, Exploding())
    crashed = run(rt, "explode now")
    assert isinstance(crashed[-1], Error)
    assert crashed[-1].code == "internal_error"
    assert "kaboom" in crashed[-1].message
    answered = run(rt, "are you back?")
    assert isinstance(answered[-1], Done)
    actor = rt.health()["actors"][0]
    assert actor["restarts"] == 1
    assert actor["healthy"] is True


def test_messages_queued_behind_a_crash_are_not_lost(make_app, runtimes, fake_openai) -> None:
    app = make_app("[runtime]\nrestart_backoff_seconds = 0.05\n")
    rt = runtimes(app, Exploding())
    sinks: dict[int, list[Event]] = defaultdict(list)
    for i, text in enumerate(["explode first", "second", "third"]):
        rt.submit("fake", "general", "alice", text, sink=sinks[i].append)
    assert rt.wait_idle(60)
    assert sinks[0][-1].code == "internal_error"  # type: ignore[attr-defined]
    assert isinstance(sinks[1][-1], Done)
    assert isinstance(sinks[2][-1], Done)
    assert sinks[1][-1].message_id < sinks[2][-1].message_id  # type: ignore[attr-defined]


def test_after_the_restart_cap_the_actor_is_reported_unhealthy(make_app, runtimes) -> None:
    app = make_app("[runtime]\nrestart_backoff_seconds = 0.01\nmax_restarts = 2\n")
    rt = runtimes(app, Exploding())
    for _ in range(3):
        run(rt, "explode")
    refused = run(rt, "hello?")
    assert isinstance(refused[-1], Error)
    assert refused[-1].code == "persona_unhealthy"
    health = rt.health()
    assert health["healthy"] is False
    assert health["actors"][0]["healthy"] is False
    assert "crashed 3 times" in health["actors"][0]["reason"]
    with app.store.read() as conn:
        assert app.store.messages.get(conn, refused[-1].user_message_id).status == "failed"  # type: ignore[union-attr]
    # Other channels are unaffected.
    assert isinstance(run(rt, "fine here", channel="other")[-1], Done)


def test_messages_of_one_channel_are_answered_in_order(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    fake_openai.chat_delay_per_token = 0.002
    rt = runtimes(app)
    done: list[Event] = []
    lock = threading.Lock()

    def sink(e: Event) -> None:
        if isinstance(e, Done | Error):
            with lock:
                done.append(e)

    accepted = [rt.submit("fake", "general", "alice", f"message {i}", sink=sink) for i in range(10)]
    assert rt.wait_idle(120)
    assert all(isinstance(e, Done) for e in done)
    by_user_message = {e.user_message_id: e.message_id for e in done}  # type: ignore[attr-defined]
    replies = [by_user_message[a.message_id] for a in accepted]
    assert replies == sorted(replies)
    seen = [r["messages"][-1]["content"] for r in fake_openai.chat_requests()]
    assert seen == [f"message {i}" for i in range(10)]


def test_twenty_channels_all_answered_none_lost(make_app, runtimes, fake_openai) -> None:
    app = make_app()
    fake_openai.chat_delay_per_token = 0.001
    rt = runtimes(app)
    finals: list[Event] = []
    lock = threading.Lock()

    def sink(e: Event) -> None:
        if isinstance(e, Done | Error):
            with lock:
                finals.append(e)

    accepted = [
        rt.submit("fake", f"room{c}", "alice", f"hello {c}-{i}", sink=sink) for i in range(3) for c in range(20)
    ]
    assert rt.wait_idle(180)
    assert len(finals) == 60
    assert all(isinstance(e, Done) for e in finals)
    with app.store.read() as conn:
        for a in accepted:
            msg = app.store.messages.get(conn, a.message_id)
            assert msg is not None
            assert msg.status == "answered"
    assert len({a.channel for a in accepted}) == 20


def test_idle_actors_are_stopped_and_come_back_on_the_next_message(make_app, runtimes) -> None:
    app = make_app("[runtime]\nidle_stop_seconds = 0.2\n")
    rt = runtimes(app)
    run(rt, "hello")
    stopped = threading.Event()

    def idle() -> bool:
        actors = rt.health()["actors"]
        return not actors or not actors[0]["running"]

    for _ in range(200):  # bounded wait on a condition the supervisor's ticker brings about
        if idle():
            stopped.set()
            break
        stopped.wait(0.05)
    assert stopped.is_set()
    assert isinstance(run(rt, "hello again")[-1], Done)


def test_the_context_record_keeps_memories_scores_budget_and_usage(make_app, runtimes) -> None:
    app = make_app()
    app.memory.add("fake", GLOBAL, "User likes Python", "preference")
    done = run(runtimes(app), "What programming language should I learn?")[-1]
    assert isinstance(done, Done)
    with app.store.read() as conn:
        record = app.store.contexts.for_message(conn, done.message_id)
    assert record is not None
    assert record.model == "openai/fake-model"
    assert record.data["memories"][0]["text"] == "User likes Python"
    assert record.data["memories"][0]["score"] >= 0.5
    assert record.data["budget"]["memories_included"] == 1
    assert record.data["usage"]["total_tokens"] > 0
