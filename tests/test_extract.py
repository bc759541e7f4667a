"""Facts extracted from exchanges by a model and kept current: ADD, UPDATE, DELETE, NONE.

The persona's model is the fake OpenAI server, which scripts both the reply and
the extraction's JSON answer (the extraction call comes after the reply's
``done``); memories live in a real store with the real local embedder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd._exceptions import InvalidInput
from agentd.access.scopes import Scope
from agentd.app import App
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from agentd.memory.extract import parse_decisions
from agentd.runtime import Done, Runtime
from agentd.search import SearchQuery
from agentd.store.memories import Memory
from tests.conftest import agentd_cli, write_home
from tests.support import wait_for
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, fake_persona

EXTRACT = """
[memory]
extract = "model"
extract_per_minute = 600
[episodes]
enabled = false
"""


@pytest.fixture
def make(
    tmp_path: Path, fake_openai: FakeOpenAI, embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch, database_url: str
) -> Iterator[Any]:
    """``make(config)`` -> (App, Runtime) over the test's one store."""
    monkeypatch.setenv(KEY_ENV, "test-key")
    made: list[tuple[App, Runtime]] = []

    def build(config: str = EXTRACT) -> tuple[App, Runtime]:
        home = write_home(tmp_path / "home", config, {"fake": fake_persona(fake_openai.url, skills="[]")}, database_url)
        app = App(load_config(home, environ={}), embedder=embedder)
        rt = Runtime(app)
        made.append((app, rt))
        return app, rt

    yield build
    for app, rt in made:
        rt.stop(grace=2)
        app.close()


def answer(*decisions: dict[str, Any]) -> Turn:
    return Turn(text=json.dumps({"memories": list(decisions)}))


def exchange(rt: Runtime, fake: FakeOpenAI, text: str, extraction: Turn, user: str = "alice") -> None:
    fake.queue(Turn(text="Noted, thanks."), extraction)
    events = list(rt.chat("fake", f"dm-{user}", user, text, timeout=60))
    assert isinstance(events[-1], Done), events[-1]
    assert rt.learning_idle(30)


def memories_of(app: App, user: str) -> list[Memory]:
    return app.memory.list_memories("fake", Scope.user(user))


@pytest.mark.both_backends
def test_add_update_delete_and_none_keep_the_users_facts_current(
    make: Any, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    app, rt = make()
    add = {"event": "ADD", "id": None, "text": "Lives in Paris", "category": "profile", "reason": "stated"}
    exchange(rt, fake_openai, "Hi! I live in Paris, by the way.", answer(add))
    (paris,) = memories_of(app, "alice")
    assert (paris.text, paris.category, paris.source_message_id) == ("Lives in Paris", "profile", 1)

    # "I moved to Berlin": the model sees the stored memory as candidate 1 and updates it.
    update = {"event": "UPDATE", "id": 1, "text": "Lives in Berlin", "reason": "moved"}
    exchange(rt, fake_openai, "I moved to Berlin last month.", answer(update))
    asked = fake_openai.chat_requests()[-1]["messages"][-1]["content"]
    assert "1. Lives in Paris" in asked
    assert "I moved to Berlin last month." in asked
    assert "Noted, thanks." not in asked  # never the persona's reply unless configured
    (berlin,) = memories_of(app, "alice")
    assert (berlin.id, berlin.text) == (paris.id, "Lives in Berlin")
    # The new text is what search finds.
    assert (
        app.memory.search(SearchQuery("which city does alice live in", _reach(), 5, 0.0)).hits[0].memory.text
        == "Lives in Berlin"
    )

    # NONE: already known; recorded, nothing changes.
    none = {"event": "NONE", "id": 1, "text": "Lives in Berlin", "reason": "already stored"}
    exchange(rt, fake_openai, "Berlin is home now.", answer(none))
    # A second fact, then DELETE when contradicted.
    cat = {"event": "ADD", "text": "Has a cat named Tom", "reason": "stated"}
    exchange(rt, fake_openai, "My cat Tom says hello.", answer(cat))
    tom = next(m for m in memories_of(app, "alice") if "Tom" in m.text)
    delete = {"event": "DELETE", "id": 1, "reason": "Tom was given away"}
    exchange(rt, fake_openai, "I gave my cat Tom to my sister; I have no cat now.", answer(delete))
    assert [m.text for m in memories_of(app, "alice")] == ["Lives in Berlin"]

    events = [(e.event, e.old_text, e.new_text, e.reason) for e in app.memory.revisions(paris.id)]
    assert events == [
        ("ADD", None, "Lives in Paris", "stated"),
        ("UPDATE", "Lives in Paris", "Lives in Berlin", "moved"),
        ("NONE", None, "Lives in Berlin", "already stored"),
    ]
    # `agentd memory history ID` shows it, also for a deleted memory.
    home = tmp_path / "home" / "agentd.toml"
    shown = agentd_cli("memory", "history", str(paris.id), "--json", config=home)
    assert shown.returncode == 0, shown.stderr
    assert [e["event"] for e in json.loads(shown.stdout)["history"]] == ["ADD", "UPDATE", "NONE"]
    gone = agentd_cli("memory", "history", str(tom.id), config=home)
    assert gone.returncode == 0, gone.stderr
    assert "DELETE" in gone.stdout
    assert "Tom was given away" in gone.stdout


def _reach() -> Any:
    from agentd.access.scopes import Reach

    return Reach("fake", "dm-alice", "alice")


def test_candidates_and_decisions_never_cross_users(make: Any, fake_openai: FakeOpenAI) -> None:
    app, rt = make()
    exchange(rt, fake_openai, "I live in Paris.", answer({"event": "ADD", "text": "Lives in Paris", "reason": "r"}))
    # Bob's extraction sees none of Alice's memories; a decision naming a candidate he does not
    # have is ignored, and his fact lands in his own scope.
    bob = answer(
        {"event": "DELETE", "id": 1, "reason": "not his"},
        {"event": "ADD", "text": "Lives in Rome", "reason": "r"},
    )
    exchange(rt, fake_openai, "I live in Paris too, no wait, in Rome.", bob, user="bob")
    assert "Lives in Paris" not in fake_openai.chat_requests()[-1]["messages"][-1]["content"]
    assert [m.text for m in memories_of(app, "alice")] == ["Lives in Paris"]
    assert [m.text for m in memories_of(app, "bob")] == ["Lives in Rome"]


def test_a_crash_between_the_reply_and_the_extraction_resumes_it_once(make: Any, fake_openai: FakeOpenAI) -> None:
    app, rt = make()
    fake_openai.queue(Turn(text="Noted."), Turn(hang=True))
    events = list(rt.chat("fake", "dm-alice", "alice", "I work as a nurse in Leeds.", timeout=60))
    assert isinstance(events[-1], Done)
    wait_for(lambda: fake_openai.hanging, 30, "the extraction call")
    rt.stop(grace=1)  # the daemon goes down with the extraction in flight
    fake_openai.release()
    calls = len(fake_openai.chat_requests())
    fake_openai.queue(answer({"event": "ADD", "text": "Works as a nurse in Leeds", "reason": "stated"}))
    app2, rt2 = make()
    assert wait_for(lambda: memories_of(app2, "alice"), 30, "the extraction to resume")
    assert rt2.learning_idle(30)
    assert [m.text for m in memories_of(app2, "alice")] == ["Works as a nurse in Leeds"]
    assert len(fake_openai.chat_requests()) == calls + 1
    rt2.stop(grace=1)
    # Done is done: the next start asks nothing.
    _app3, rt3 = make()
    assert rt3.learning_idle(30)
    assert len(fake_openai.chat_requests()) == calls + 1


def test_the_reply_is_given_to_the_model_only_when_configured(make: Any, fake_openai: FakeOpenAI) -> None:
    _app, rt = make(EXTRACT.replace('extract = "model"', 'extract = "model"\nextract_from = "exchange"'))
    exchange(rt, fake_openai, "I play the cello.", answer())
    assert "Noted, thanks." in fake_openai.chat_requests()[-1]["messages"][-1]["content"]


def test_extraction_is_off_by_default_and_with_the_offline_model(make: Any, fake_openai: FakeOpenAI) -> None:
    app, rt = make("")
    fake_openai.queue(Turn(text="Noted."))
    assert isinstance(list(rt.chat("fake", "dm-alice", "alice", "I live in Oslo.", timeout=60))[-1], Done)
    assert rt.learning_idle(30)
    assert len(fake_openai.chat_requests()) == 1
    assert not memories_of(app, "alice")


def test_answers_that_are_not_the_json_asked_for() -> None:
    fenced = '```json\n{"memories": [{"event": "add", "text": "Likes tea", "id": "2"}]}\n```'
    (d,) = parse_decisions(fenced)
    assert (d.event, d.text, d.number, d.category) == ("ADD", "Likes tea", 2, "fact")
    assert parse_decisions('Sure! {"memories": []} Hope this helps.') == []
    assert [d.event for d in parse_decisions('{"memories": [{"event": "MERGE"}, 3, {"event": "NONE"}]}')] == ["NONE"]
    with pytest.raises(InvalidInput, match="not the JSON asked for"):
        parse_decisions("I could not find any facts.")


@pytest.mark.both_backends
def test_the_history_of_a_memory_over_the_api(daemons: Any, fake_openai: FakeOpenAI) -> None:
    running = daemons(EXTRACT, personas={"fake": fake_persona(fake_openai.url, skills="[]")})
    fake_openai.queue(Turn(text="Noted."), answer({"event": "ADD", "text": "Plays the oboe", "reason": "stated"}))
    events = running.chat("I play the oboe in a band.", channel="dm-alice")
    assert events[-1].event == "done"

    def stored() -> list[dict[str, Any]]:
        got = running.client.get("/v1/memories", params={"persona": "fake", "scope": "user:alice"})
        return list(got.json()["memories"])

    (memory,) = wait_for(stored, 30, "the extracted fact")
    answered = running.client.get(f"/v1/memories/{memory['id']}/history")
    assert answered.status_code == 200, answered.text
    (entry,) = answered.json()["history"]
    assert (entry["event"], entry["new_text"], entry["reason"]) == ("ADD", "Plays the oboe", "stated")
    missing = running.client.get("/v1/memories/999999/history")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
