"""Rooms: several personas in one channel, answering people and each other.

Over real HTTP with the fake OpenAI server (its reply echoes the last user message, so a message
naming two personas makes their replies name each other), a real SQLite store, and a real
``agentd serve`` process for the crash.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from agentd.config import ChannelConfig
from agentd.runtime.rooms import answerers, called_on, named
from tests.conftest import write_home
from tests.fakeopenai import FakeOpenAI, Turn, fake_persona
from tests.pgserver import PostgresDatabases
from tests.support import COUNTS_TURNS_ON_METRICS, Running, read_sse, wait_for
from tests.support.serve import Serve

TRIO = ("alpha", "beta", "gamma")


def _room(answer: str = "addressed", extra: str = "") -> str:
    return f'[channels.lounge]\npersonas = ["alpha", "beta", "gamma"]\nanswer = "{answer}"\n{extra}'


def _personas(url: str) -> dict[str, str]:
    return {name: fake_persona(url, name, skills="[]") for name in TRIO}


def _post(d: Running, text: str, user: str = "alice", **extra: Any) -> dict[str, Any]:
    response = d.client.post("/v1/channels/lounge/messages", json={"user": user, "text": text, **extra})
    assert response.status_code == 202, response.text
    return response.json()  # type: ignore[no-any-return]


def _replies(d: Running) -> list[dict[str, Any]]:
    return [m for m in d.messages("lounge") if m["role"] == "assistant"]


def _pending(d: Running) -> int:
    with d.app.store.read() as conn:
        return len(d.app.store.messages.with_status(conn, "pending"))


def _settled(d: Running, replies: int) -> list[dict[str, Any]]:
    """The room's replies once there are ``replies`` of them and nothing is left to answer."""
    wait_for(lambda: len(_replies(d)) >= replies and _pending(d) == 0, 60, f"{replies} replies, none pending")
    return _replies(d)


def _prompt_of(fake: FakeOpenAI, persona: str) -> list[dict[str, Any]]:
    """The messages of the newest request ``persona`` sent to the model."""
    found = [r for r in fake.chat_requests() if f"You are {persona}," in r["messages"][0]["content"]]
    assert found, f"no request of {persona}"
    return found[-1]["messages"]  # type: ignore[no-any-return]


# -- who answers, decided from the text ---------------------------------------------------------


def test_names_are_read_in_the_order_they_are_given() -> None:
    """A leading ``NAME:`` and every ``@NAME``, in order, once each; a name inside a word is none."""
    assert named("beta: and @gamma, @ALPHA and @beta", TRIO) == ["beta", "gamma", "alpha"]
    assert named("email alpha@gamma.org about it", TRIO) == []
    assert named("@alphabet soup", TRIO) == []


def test_each_answer_mode_chooses_its_personas() -> None:
    """addressed: the named ones else the first; all: everyone; rotate: the next after the last;
    require_mention: nobody unless named."""
    room = ChannelConfig(personas=list(TRIO))
    assert answerers(room, "@gamma @alpha hi") == ["gamma", "alpha"]
    assert answerers(room, "hi") == ["alpha"]
    assert answerers(room.model_copy(update={"require_mention": True}), "hi") == []
    assert answerers(room.model_copy(update={"answer": "all"}), "hi") == list(TRIO)
    strict_all = room.model_copy(update={"answer": "all", "require_mention": True})
    assert answerers(strict_all, "@gamma and @alpha") == ["alpha", "gamma"]
    assert answerers(strict_all, "hi") == []
    rotate = room.model_copy(update={"answer": "rotate"})
    assert answerers(rotate, "hi", last="alpha") == ["beta"]
    assert answerers(rotate, "hi", last="gamma") == ["alpha"]
    assert answerers(rotate, "hi") == ["alpha"]
    assert called_on(room, "alpha", "@alpha and @beta: agreed") == ["beta"]


def test_a_bad_answer_mode_is_refused_naming_the_key(tmp_path: Path) -> None:
    from agentd._exceptions import ConfigError
    from agentd.config import load_config

    home = write_home(tmp_path, _room("loudest"))
    with pytest.raises(ConfigError, match="answer"):
        load_config(home, environ={})


# -- over HTTP ------------------------------------------------------------------------------------


def test_answer_all_has_every_persona_answer_in_order_each_seeing_the_others_by_name(
    daemons: Callable[..., Running], fake_openai: FakeOpenAI
) -> None:
    """Every persona answers, in the order of ``personas``; each prompt carries the others' replies
    as attributed user lines, and only its own as assistant turns."""
    d = daemons(_room("all"), _personas(fake_openai.url))
    posted = _post(d, "what do you all think?")
    assert posted["persona"] == "alpha"
    assert posted["triggered"] == ["beta", "gamma"]
    replies = _settled(d, 3)
    assert [r["persona"] for r in replies] == list(TRIO)
    gamma = _prompt_of(fake_openai, "gamma")
    said = [(m["role"], m["content"]) for m in gamma[1:]]
    assert ("user", "alpha: echo: what do you all think?") in said
    assert ("user", "beta: echo: what do you all think?") in said
    assert said[-1] == ("user", "what do you all think?")  # one person speaks: it is the user's
    assert not [m for m in gamma if m["role"] == "assistant"]
    # A second message: each persona's own earlier reply is its assistant turn, the others' are not.
    _post(d, "and now?")
    _settled(d, 6)
    beta = _prompt_of(fake_openai, "beta")
    assert [m["content"] for m in beta if m["role"] == "assistant"] == ["echo: what do you all think?"]
    # A second person speaks: now every person's line says who wrote it too.
    _post(d, "hello from bob", user="bob")
    _settled(d, 9)
    said = [m["content"] for m in _prompt_of(fake_openai, "gamma")[1:]]
    assert "alice: and now?" in said
    assert said[-1] == "bob: hello from bob"


def test_a_persona_that_fails_still_lets_the_next_answer(
    daemons: Callable[..., Running], fake_openai: FakeOpenAI
) -> None:
    """alpha's model refuses (400): alpha's turn fails, and beta and gamma answer all the same."""
    d = daemons(_room("all"), _personas(fake_openai.url))
    fake_openai.queue(Turn(status=400))
    _post(d, "anyone there?")
    assert [r["persona"] for r in _settled(d, 2)] == ["beta", "gamma"]
    statuses = [m["status"] for m in d.messages("lounge") if m["role"] == "user"]
    assert statuses == ["failed"]


def test_require_mention_answers_only_the_named(daemons: Callable[..., Running], fake_openai: FakeOpenAI) -> None:
    """A message naming nobody is stored and answered by nobody; one naming beta, by beta alone."""
    d = daemons(_room("addressed", "require_mention = true\n"), _personas(fake_openai.url))
    quiet = _post(d, "just chatting")
    assert quiet["persona"] is None
    assert quiet["triggered"] == []
    _post(d, "@beta what is new?")
    replies = _settled(d, 1)
    assert [r["persona"] for r in replies] == ["beta"]
    statuses = {m["content"]: m["status"] for m in d.messages("lounge") if m["role"] == "user"}
    assert statuses == {"just chatting": "noted", "@beta what is new?": "answered"}


@pytest.mark.local_actors(COUNTS_TURNS_ON_METRICS)
def test_a_chain_stops_at_max_persona_turns_with_an_event_and_a_metric(
    daemons: Callable[..., Running], fake_openai: FakeOpenAI
) -> None:
    """alice names alpha and beta; their echoed replies name each other. Two persona-to-persona
    replies are allowed; the two replies after them name a persona again and are stopped, visibly."""
    d = daemons(_room("addressed", "max_persona_turns = 2\n"), _personas(fake_openai.url))

    def stopped_total() -> float:
        text = d.client.get("/metrics").text
        lines = [ln for ln in text.splitlines() if ln.startswith("agentd_persona_turns_stopped_total")]
        return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)

    before = stopped_total()
    done = lambda events: sum(e.event == "persona_turns_stopped" for e in events) >= 2  # noqa: E731
    follower, thread = _follow(d, done)
    _post(d, "@alpha @beta hi")
    replies = _settled(d, 4)
    thread.join(60)
    assert [r["persona"] for r in replies].count("alpha") == 2
    assert [r["persona"] for r in replies].count("beta") == 2
    stops = [e for e in follower.snapshot() if e.event == "persona_turns_stopped"]
    assert len(stops) == 2
    assert all(e.data["max_persona_turns"] == 2 for e in stops)
    assert stopped_total() - before == 2
    # beta answered alpha's reply: attributed to alpha, as the current message.
    chained = [p for p in _prompts(fake_openai, "beta") if p[-1]["content"].startswith("alpha: ")]
    assert chained, "beta never answered alpha"
    # A person's next message starts a new count: two more persona-to-persona replies.
    _post(d, "@alpha @beta once more")
    assert len(_settled(d, 8)) == 8
    wait_for(lambda: stopped_total() - before == 4, 30, "the second chain's stops counted")


def test_a_persona_s_call_on_another_counts_toward_admission_control(
    daemons: Callable[..., Running], fake_openai: FakeOpenAI
) -> None:
    """A chain's next turn is stored with the reply that calls on it, so it is never refused; but it
    is accepted work like any message: while it runs, a person's post past the bound gets 429."""
    d = daemons(_room() + "[daemon]\nmax_pending = 1\nmax_pending_per_channel = 1000\n", _personas(fake_openai.url))
    fake_openai.queue(Turn(text="@beta have a look"), Turn(text="Looked.", hang=True))
    _post(d, "@alpha hi")
    wait_for(lambda: fake_openai.hanging == 1, 60, "beta's turn, called on by alpha, to be running")
    body = {"user": "alice", "text": "and now?"}
    refused = d.client.post("/v1/channels/lounge/messages", json=body)
    assert refused.status_code == 429, refused.text
    fake_openai.release()
    assert [r["persona"] for r in _settled(d, 2)] == ["alpha", "beta"]
    fake_openai.queue(Turn(text="Now, yes."))
    # The bound frees once the daemon has the turn's end; with worker processes that comes over the
    # pipe a moment after the reply is stored, so the post may be refused (and not stored) until then.
    wait_for(lambda: d.client.post("/v1/channels/lounge/messages", json=body).status_code == 202, 60, "the post")
    assert len(_settled(d, 3)) == 3


def _prompts(fake: FakeOpenAI, persona: str) -> list[list[dict[str, Any]]]:
    return [r["messages"] for r in fake.chat_requests() if f"You are {persona}," in r["messages"][0]["content"]]


def _follow(d: Running, until: Callable[[list[Any]], bool]) -> tuple[Any, threading.Thread]:
    from tests.support import follow

    follower, thread = follow(d.client, "lounge", until=until)
    wait_for(follower.ready.is_set, 30, "the feed to open")
    return follower, thread


def test_chat_in_a_room_says_who_else_was_triggered(daemons: Callable[..., Running], fake_openai: FakeOpenAI) -> None:
    """``POST /v1/chat`` without a persona: ``triggered`` first, then the first persona's reply."""
    d = daemons(_room("addressed", "max_persona_turns = 0\n"), _personas(fake_openai.url))
    body = {"channel": "lounge", "user": "alice", "message": "@gamma @beta hello"}
    with d.client.stream("POST", "/v1/chat", json=body) as response:
        assert response.status_code == 200, response.read()
        events = list(read_sse(response.iter_lines()))
    assert events[0].event == "triggered"
    assert events[0].data["persona"] == "gamma"
    assert events[0].data["triggered"] == ["beta"]
    assert events[-1].event == "done"
    assert events[-1].data["text"] == "echo: @gamma @beta hello"
    assert [r["persona"] for r in _settled(d, 2)] == ["gamma", "beta"]


# -- a real agentd serve: worker processes, and kill -9 in the middle of a chain -----------------


class _Serve(Serve):
    """``agentd serve --port 0`` in a subprocess, posting to the lounge as alice."""

    def post(self, text: str) -> dict[str, Any]:
        answer = httpx.post(f"{self.url}/v1/channels/lounge/messages", json={"user": "alice", "text": text}, timeout=60)
        assert answer.status_code == 202, answer.text
        return answer.json()  # type: ignore[no-any-return]


@pytest.fixture
def serve(tmp_path: Path, fake_openai: FakeOpenAI) -> Iterator[Callable[[str], _Serve]]:
    running: list[_Serve] = []

    def start(config: str) -> _Serve:
        running.append(_Serve(write_home(tmp_path, config, _personas(fake_openai.url))))
        return running[-1]

    yield start
    for s in running:
        s.stop()


def _answers(tmp_path: Path) -> tuple[dict[int, int], list[str], list[str]]:
    """Complete replies per message they answer; the statuses of the messages answered by turns;
    the replies' personas in order (read from the store, as after a crash)."""
    import sqlite3

    with sqlite3.connect(tmp_path / "agentd.db") as db:
        replies = db.execute(
            "SELECT reply_to, persona FROM messages WHERE role = 'assistant' AND status = 'complete' ORDER BY id"
        ).fetchall()
        asked = [s for (s,) in db.execute("SELECT status FROM messages WHERE role IN ('user', 'trigger')")]
    counts: dict[int, int] = {}
    for reply_to, _persona in replies:
        counts[int(reply_to)] = counts.get(int(reply_to), 0) + 1
    return counts, asked, [str(p) for _r, p in replies]


def test_a_chain_runs_in_worker_processes(serve: Callable[[str], _Serve], tmp_path: Path) -> None:
    """``[runtime] workers = 2``: the triggers a worker's reply stores are routed by the daemon."""
    s = serve(_room("addressed", "max_persona_turns = 2\n[runtime]\nworkers = 2\n"))
    s.post("@alpha @beta hi")
    wait_for(lambda: len(_answers(tmp_path)[2]) == 4 and "pending" not in _answers(tmp_path)[1], 120, "4 replies")
    counts, asked, personas = _answers(tmp_path)
    assert sorted(personas) == ["alpha", "alpha", "beta", "beta"]
    assert set(counts.values()) == {1}
    assert set(asked) == {"answered"}


def test_kill_9_in_the_middle_of_a_chain_loses_no_reply_and_doubles_none(
    serve: Callable[[str], _Serve], fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """alpha's reply (naming beta) is stored with beta's triggers; the daemon is killed while beta's
    model call hangs. After a restart every message and trigger is answered exactly once."""
    config = _room("addressed", "max_persona_turns = 2\n")
    s = serve(config)
    fake_openai.queue(Turn(text="echo: alice: @alpha @beta hi"), Turn(hang=True))
    s.post("@alpha @beta hi")
    wait_for(lambda: fake_openai.hanging == 1, 60, "beta's model call to hang")
    assert _answers(tmp_path)[2] == ["alpha"]
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait(10)
    fake_openai.release()
    serve(config)
    wait_for(lambda: len(_answers(tmp_path)[2]) >= 4 and "pending" not in _answers(tmp_path)[1], 120, "4 replies")
    counts, asked, personas = _answers(tmp_path)
    assert sorted(personas) == ["alpha", "alpha", "beta", "beta"]
    assert set(counts.values()) == {1}, counts
    assert set(asked) == {"answered"}


def test_a_chain_crosses_daemons_sharing_one_postgresql(
    tmp_path: Path, fake_openai: FakeOpenAI, postgres: PostgresDatabases
) -> None:
    """Two daemons on one PostgreSQL: beta's turns are owned by one, alpha's by the other; the call
    alpha's reply stores for beta is answered by beta's owner, and every message once."""
    url = postgres.fresh()
    config = _room("addressed", "max_persona_turns = 2\n") + "[cluster]\nheartbeat_seconds = 0.5\n"
    daemons = [_Serve(write_home(tmp_path / f"d{i}", config, _personas(fake_openai.url), url)) for i in (0, 1)]
    engine = sa.create_engine(url)
    try:

        def replies() -> list[tuple[int, str]]:
            with engine.connect() as conn:
                pending = conn.execute(sa.text("SELECT count(*) FROM messages WHERE status = 'pending'")).scalar()
                rows = conn.execute(
                    sa.text(
                        "SELECT reply_to, persona FROM messages WHERE role = 'assistant' AND status = 'complete' "
                        "ORDER BY id"
                    )
                ).fetchall()
            return [(int(r), str(p)) for r, p in rows] if not pending else []

        daemons[1].post("@beta hello")  # daemon 1 takes (beta, lounge)
        wait_for(lambda: len(replies()) == 1, 60, "beta's first reply")
        daemons[0].post("@alpha @beta hi")  # daemon 0 takes (alpha, lounge)
        found = wait_for(lambda: len(replies()) >= 5 and replies(), 120, "the chain's replies")
        assert sorted(p for _r, p in found) == ["alpha", "alpha", "beta", "beta", "beta"]
        assert len({r for r, _p in found}) == len(found)  # each message answered once
        owned = [httpx.get(f"{d.url}/healthz", timeout=30).json()["cluster"]["channels"] for d in daemons]
        assert owned == [1, 1]  # alpha's turns on daemon 0, beta's on daemon 1
    finally:
        engine.dispose()
        for d in daemons:
            d.stop()
        postgres.drop(url)


def test_budget_and_inspect_show_the_room_from_a_persona_s_side(
    daemons: Callable[..., Running], fake_openai: FakeOpenAI
) -> None:
    """``agentd budget`` prints the room's transcript as beta's prompt carries it (alpha's reply
    attributed, beta's own as its turn); ``agentd inspect`` says alpha called on beta."""
    from tests.conftest import agentd_cli

    d = daemons(_room("addressed", "max_persona_turns = 1\n"), _personas(fake_openai.url))
    _post(d, "@alpha @beta hi")
    replies = _settled(d, 3)
    asked = {m["id"] for m in d.messages("lounge") if m["role"] == "user"}
    called = [r for r in replies if r["reply_to"] not in asked]
    # beta answers alice's message after alpha (a trigger too), and alpha's reply (the one call allowed).
    assert [r["persona"] for r in called] == ["beta", "beta"]
    shown = agentd_cli("budget", "beta", "--channel", "lounge", "--user", "alice", config=d.home)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.split("transcript as beta sees it")[1].splitlines()
    assert any(ln.split()[0] == "user" and "alpha: echo: @alpha @beta hi" in ln for ln in lines), lines
    assert any(ln.split()[0] == "assistant" and "(its own turn)" in ln for ln in lines), lines
    inspected = "".join(agentd_cli("inspect", str(r["id"]), config=d.home).stdout for r in called)
    assert "alpha called on beta (persona-to-persona reply 1 of the chain)" in inspected, inspected
    assert "beta answered alice's message after the personas before it" in inspected, inspected


def test_a_room_s_transcript_is_kept_between_turns_not_read_or_counted_again(app: Any) -> None:
    """In a room of two personas (buddy, scholar) and two people, the second prompt reads no
    stored message again (the history cache) and counts no stored text again: only what every
    prompt counts (system prompt, current message) and one name per author."""
    from agentd.llm.tokens import counter_for
    from agentd.prompt.builder import ContextBuilder

    counter = counter_for(app.personas["buddy"].model)
    calls = [0]

    class Counting:
        name = counter.name

        def count(self, text: str) -> int:
            calls[0] += 1
            return counter.count(text)

    rows = []
    for i in range(3000):
        speaker = ("buddy", "scholar")[i % 4 // 2] if i % 2 else ("alice", "bob")[i % 4 // 2]
        role = "assistant" if i % 2 else "user"
        status = "answered" if role == "user" else "complete"
        rows.append({"channel": "big", "role": role, "author": speaker, "content": f"line {i} " * 20, "status": status})
    with app.store.write() as conn:
        app.store.messages.add_many(conn, rows)
    statements: list[str] = []
    sa.event.listen(app.store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    builder = ContextBuilder(app.store, app.config, app.windows, lambda _m: Counting())
    buddy = app.personas["buddy"]
    first = builder.build(buddy, "big", "hello", speaker="alice", room=True)
    said = [m.content for m in first.messages if m.source == "history"]
    assert any(s.startswith("scholar: line") for s in said)
    assert any(s.startswith("bob: line") for s in said)
    calls[0], statements[:] = 0, []
    second = builder.build(buddy, "big", "hello", speaker="alice", room=True)
    assert second == first
    assert calls[0] <= 6  # system prompt, current message, tools; the names of scholar, alice, bob
    assert not [s for s in statements if "ORDER BY id DESC LIMIT" in s and "id > " not in s]
