"""Subagents over HTTP: ``delegate(persona, task)`` runs another persona in a
child channel with its own memory context at the smaller budget (1000 tokens, limit
10), and its answer comes back as the tool result; depth is bounded, cycles refused."""

from __future__ import annotations

import json

from agentd.access.scopes import GLOBAL
from agentd.app import App
from agentd.config import load_config
from tests.support import read_sse, wait_for
from tests.support.fakeopenai import FakeOpenAI, Turn, fake_persona

TASK = "When is the Apollo rocket launch deadline?"


def facts(i: int) -> str:
    """A long memory (~150 tokens) that is relevant to TASK."""
    return (
        f"Apollo rocket launch deadline note {i}: the Apollo rocket launch deadline is the third of March. "
        + "The Apollo rocket launch team confirmed the launch deadline again in the planning meeting. " * 5
    )


def personas(
    fake: FakeOpenAI, helper_skills: str = '["recall"]', extra: dict[str, str] | None = None
) -> dict[str, str]:
    return {
        "boss": fake_persona(fake.url, "boss", '["delegate"]'),
        "helper": fake_persona(fake.url, "helper", helper_skills),
        **(extra or {}),
    }


def test_delegate_runs_the_subagent_with_its_own_smaller_memory_context(daemons, fake_openai) -> None:
    d = daemons(personas=personas(fake_openai))
    for i in range(12):
        d.app.memory.add("helper", GLOBAL, facts(i), "project")
    d.app.memory.add("boss", GLOBAL, "Boss memory: the Apollo rocket launch deadline is secret", "project")
    fake_openai.queue(
        Turn(tool_calls=[("delegate", {"persona": "helper", "task": TASK})]),
        Turn(text="The deadline is the third of March."),
        Turn(text="The helper says: the third of March."),
    )
    events = d.chat("Ask the helper about the launch deadline", persona="boss")
    names = [e.event for e in events]
    assert names[0] == "memory_context"
    assert names[-1] == "done"
    call = next(e for e in events if e.event == "tool_call")
    assert call.data["name"] == "delegate"
    assert call.data["arguments"] == {"persona": "helper", "task": TASK}
    result = next(e for e in events if e.event == "tool_result").data
    assert result["error"] is None
    answer = result["result"]
    assert answer["persona"] == "helper"
    assert answer["answer"] == "The deadline is the third of March."
    assert answer["channel"] == "general~helper"
    assert events[-1].data["text"] == "The helper says: the third of March."
    # The subagent's request: its own memories (not the boss's), more than max_per_reply but cut by the
    # 1000-token budget.
    helper_request = fake_openai.chat_requests()[1]
    system = "\n".join(m["content"] for m in helper_request["messages"] if m["role"] == "system")
    assert "You are helper" in system
    assert "Boss memory" not in system
    assert helper_request["messages"][-1] == {"role": "user", "content": TASK}
    shown = [line for line in system.splitlines() if line.startswith('- "Apollo rocket launch deadline note')]
    assert 3 < len(shown) < 10
    assert len(shown) == answer["memories_used"]
    with d.app.store.read() as conn:
        record = d.app.store.contexts.for_message(conn, answer["message_id"])
    assert record is not None
    assert record.data["budget"]["memory_tokens"] <= 1000
    assert record.data["budget"]["memories_dropped"] > 0
    # The child channel keeps the exchange; the boss's tool message carried the answer back.
    child = d.messages("general~helper")
    assert [(m["role"], m["content"]) for m in child] == [("user", TASK), ("assistant", answer["answer"])]
    tool_msg = next(m for m in fake_openai.chat_requests()[2]["messages"] if m["role"] == "tool")
    assert json.loads(tool_msg["content"])["answer"] == answer["answer"]


def test_delegation_depth_is_bounded_and_cycles_are_refused(daemons, fake_openai) -> None:
    three = personas(fake_openai, '["delegate"]', {"clerk": fake_persona(fake_openai.url, "clerk", "[]")})
    d = daemons("[runtime]\ndelegate_max_depth = 1\n", personas=three)
    fake_openai.queue(
        Turn(tool_calls=[("delegate", {"persona": "helper", "task": "find out"})]),  # boss -> helper
        Turn(
            tool_calls=[
                ("delegate", {"persona": "boss", "task": "loop back"}),  # helper -> boss: cycle
                ("delegate", {"persona": "clerk", "task": "go deeper"}),
            ]
        ),  # helper -> clerk: too deep
        Turn(text="helper could not delegate"),
        Turn(text="boss is done"),
    )
    events = d.chat("start", persona="boss")
    assert events[-1].event == "done"
    assert events[-1].data["text"] == "boss is done"
    result = next(e for e in events if e.event == "tool_result").data["result"]
    assert result["answer"] == "helper could not delegate"
    helper_followup = fake_openai.chat_requests()[2]
    errors = [json.loads(m["content"])["error"] for m in helper_followup["messages"] if m["role"] == "tool"]
    assert errors[0]["code"] == "InvalidInput"
    assert "would loop: boss -> helper -> boss" in errors[0]["message"]
    assert errors[1]["code"] == "ExecutionFailed"
    assert "depth limit (1)" in errors[1]["message"]
    assert len(fake_openai.chat_requests()) == 4  # the clerk never ran


def test_shutdown_during_a_subagent_stores_both_turns_as_interrupted_and_keeps_the_message(
    daemons, fake_openai, embedder
) -> None:
    d = daemons("[daemon]\nshutdown_grace_seconds = 0.2\n", personas=personas(fake_openai))
    report = " ".join(f"line{i}" for i in range(400))
    fake_openai.queue(
        Turn(tool_calls=[("delegate", {"persona": "helper", "task": "write a long report"})]), Turn(text=report)
    )
    fake_openai.chat_delay_per_token = 0.02  # the helper's report: about 8 s of streaming
    body = {"persona": "boss", "channel": "general", "user": "alice", "message": "get me the report"}
    with d.client.stream("POST", "/v1/chat", json=body) as response:
        user_id = int(response.headers["X-Agentd-Message-Id"])
        wait_for(
            lambda: len(fake_openai.chat_requests()) == 2 and fake_openai.streaming.is_set(), 30, "the helper to stream"
        )
        d.server.request_stop()
        events = list(read_sse(response.iter_lines()))
    assert events[-1].event == "error"
    assert events[-1].data["code"] == "interrupted"
    d.thread.join(30)
    assert not d.thread.is_alive()
    app = App(load_config(d.home, environ={}), embedder=embedder)  # the daemon closed its store
    try:
        with app.store.read() as conn:
            boss_msg = app.store.messages.get(conn, user_id)
            child = app.store.messages.after(conn, "general~helper", 0)
    finally:
        app.close()
    assert boss_msg is not None
    assert boss_msg.status == "pending"  # cut by shutdown: answered after the next start
    assert [(m.role, m.status) for m in child] == [("user", "interrupted"), ("assistant", "interrupted")]
    assert child[1].content
    assert report.startswith(child[1].content)
    assert child[1].content != report
