"""Episodic memory: every answered exchange indexed in the background and recalled by meaning.

Through the runtime's public API with the offline model and the real local
embedder on a real store (both backends); a slow embedder is the fake OpenAI
server's, through litellm.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd._exceptions import ConfigError
from agentd.access.scopes import Reach, Scope
from agentd.app import App
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from agentd.memory.episodes import Episodes
from agentd.runtime import Done, MemoryContext, Runtime
from agentd.search import SearchQuery
from agentd.store.memories import Memory
from tests.conftest import agentd_cli, write_home
from tests.support import wait_for
from tests.support.fakeopenai import EmbeddingFault, FakeOpenAI, embedding_config

#: A persona with a small window, so early exchanges leave the recent history and must be recalled.
TALKER = """
name = "talker"
model = "offline"
max_reply_tokens = 150
context_window = 400
channels = ["general", "dm-*", "other"]
skills = []
system_prompt = "You are talker."
"""

FILLER = [
    "The weather was grey all morning and the bus came late again today.",
    "I spent the afternoon sorting old receipts into folders by month.",
    "We watched a documentary about deep sea creatures last night.",
    "My neighbour finally fixed the squeaky gate at the front of the house.",
    "Lunch was a sandwich and some soup from the corner shop downstairs.",
    "The meeting ran long because the projector would not connect at first.",
]


@pytest.fixture
def make(tmp_path: Path, embedder: LocalEmbedder, database_url: str) -> Iterator[Any]:
    """``make(config)`` -> (App, Runtime) over one store per test (the same store on every call)."""
    made: list[tuple[App, Runtime]] = []

    def build(config: str = "") -> tuple[App, Runtime]:
        home = write_home(tmp_path / "home", config, {"talker": TALKER}, database_url)
        app = App(load_config(home, environ={}), embedder=embedder)
        rt = Runtime(app)
        made.append((app, rt))
        return app, rt

    yield build
    for app, rt in made:
        rt.stop(grace=5)
        app.close()


def say(rt: Runtime, channel: str, user: str, text: str) -> list[Any]:
    events = list(rt.chat("talker", channel, user, text, timeout=60))
    assert isinstance(events[-1], Done), events[-1]
    return events


def episodes_in(app: App, scope: Scope) -> list[Memory]:
    return app.memory.list_memories("talker", scope, limit=1000)


@pytest.mark.both_backends
@pytest.mark.parametrize("keep", ["user", "exchange"])
def test_every_answered_exchange_becomes_an_episode_with_its_time_and_context(make: Any, keep: str) -> None:
    app, rt = make(f'[episodes]\nkeep = "{keep}"\n')
    say(rt, "general", "alice", "My sister Clara is getting married in Lisbon next spring.")
    say(rt, "general", "bob", FILLER[0])
    assert rt.learning_idle(30)
    found = sorted(episodes_in(app, Scope.episodes(Scope.channel("general"))), key=lambda m: m.id)
    assert [m.category for m in found] == ["episode", "episode"]
    first, second = found
    assert first.text.startswith("alice: My sister Clara is getting married in Lisbon")
    if keep == "exchange":  # the reply is part of the episode's text
        assert "\ntalker: " in first.text
    else:  # the default: the user's line is the text, the reply its indexed context
        assert first.text == "alice: My sister Clara is getting married in Lisbon next spring."
        assert "talker: " in first.metadata["context"]
    with app.store.read() as conn:
        asked = app.store.messages.get(conn, first.source_message_id or 0)
    assert asked is not None
    assert asked.author == "alice"
    assert first.created_at == asked.created_at  # its real time
    # The earlier exchange is the second episode's indexed context.
    assert "Clara" in second.metadata["context"]
    assert second.metadata["episode"]["user"] == "bob"


def test_a_message_without_a_content_word_is_not_kept_but_passed_over(make: Any) -> None:
    """Greetings and thanks have nothing to recall them by: nothing is embedded or kept for them
    ([episodes] keep = "user"), and indexing goes on past them."""
    app, rt = make()
    for text in ("hi!", "thanks, ok", "My sister Clara is getting married in Lisbon next spring."):
        say(rt, "general", "alice", text)
    assert rt.learning_idle(30)
    found = episodes_in(app, Scope.episodes(Scope.channel("general")))
    assert [m.text for m in found] == ["alice: My sister Clara is getting married in Lisbon next spring."]
    with app.store.read() as conn:
        last = app.store.messages.recent(conn, "general", 10, roles=("user",))[0]
        assert app.store.cursors.get(conn, "episodes", "general") == last.id
    # With the reply as part of the text (keep = "exchange"), the reply is what may be recalled.
    app2, rt2 = make('[episodes]\nkeep = "exchange"\n')
    say(rt2, "other", "bob", "hi!")
    assert rt2.learning_idle(30)
    (greeting,) = episodes_in(app2, Scope.episodes(Scope.channel("other")))
    assert greeting.text.startswith("bob: hi!\ntalker: ")


@pytest.mark.both_backends
def test_an_exchange_gone_from_the_recent_history_is_recalled_by_meaning(make: Any, tmp_path: Path) -> None:
    app, rt = make()
    say(rt, "general", "alice", "My sister Clara is getting married in Lisbon next spring.")
    for line in FILLER:
        say(rt, "general", "alice", line)
    assert rt.learning_idle(30)
    events = say(rt, "general", "alice", "Where is Clara's wedding going to be?")
    context = next(e for e in events if isinstance(e, MemoryContext))
    assert [e.category for e in context.episodes] == ["episode"] * len(context.episodes)
    assert any("Lisbon" in e.text for e in context.episodes), context.episodes
    done = events[-1]
    assert done.budget["episode_tokens"] > 0
    assert done.budget["episodes_included"] == len(context.episodes)
    # What the model was given: its own section, the exchange quoted with its date.
    record = app.store
    with record.read() as conn:
        stored = record.contexts.for_message(conn, done.message_id)
    assert stored is not None
    assert any("Lisbon" in e["text"] for e in stored.data["episodes"])
    # Episodes the recent history still carries are not recalled again.
    in_history = set(stored.data["history_ids"])
    assert not {e.id for e in context.episodes if episodes_source(app, e.id) in in_history}, (
        "an episode in the recent history was repeated"
    )
    # agentd inspect shows them.
    shown = agentd_cli("inspect", str(done.message_id), config=tmp_path / "home" / "agentd.toml")
    assert shown.returncode == 0, shown.stderr
    assert "earlier conversations recalled" in shown.stdout
    assert "Lisbon" in shown.stdout
    assert "episodes" in shown.stdout  # the ContextBudget line
    # Listed on demand, never among the memories.
    home = tmp_path / "home" / "agentd.toml"
    listed = agentd_cli("memory", "list", "-p", "talker", "--episodes", "channel:general", "--json", config=home)
    assert listed.returncode == 0, listed.stderr
    assert {m["category"] for m in json.loads(listed.stdout)} == {"episode"}
    assert len(json.loads(listed.stdout)) >= 7
    plain = agentd_cli("memory", "list", "-p", "talker", "--json", config=home)
    assert plain.returncode == 0
    assert json.loads(plain.stdout) == []


def episodes_source(app: App, memory_id: int) -> int | None:
    return app.memory.get(memory_id).source_message_id


@pytest.mark.both_backends
def test_episodes_stay_in_their_channel_and_direct_exchanges_stay_with_their_user(make: Any) -> None:
    # The direct channels are direct by config (as a deployment says so); unposted ones are recalled from too.
    app, rt = make('[channels."dm-*"]\nvisibility = "direct"\n')
    say(rt, "general", "alice", "The group picnic is at Riverside Park on Saturday.")
    say(rt, "dm-alice", "alice", "Privately: my bank PIN reminder is the year my dog Rex was born.")
    say(rt, "dm-bob", "bob", "My dog Rex needs his vaccination next week.")
    assert rt.learning_idle(30)
    # Direct exchanges are the user's own (every direct channel of theirs), never the channel's.
    assert len(episodes_in(app, Scope.episodes(Scope.user("alice")))) == 1
    assert not episodes_in(app, Scope.episodes(Scope.channel("dm-alice")))

    def recalled(channel: str, user: str, text: str) -> list[str]:
        return [h.memory.text for h in rt.preview("talker", channel, user, text).retrieval.episodes]

    # A group channel sees its own episodes, never a member's direct ones.
    assert any("Riverside" in t for t in recalled("general", "alice", "where is the picnic in the park?"))
    assert not any("Rex" in t for t in recalled("general", "alice", "when was my dog Rex born?"))
    # Another channel sees nothing of the group's.
    assert not any("Riverside" in t for t in recalled("other", "alice", "where is the picnic in the park?"))
    # Alice in another direct channel of hers sees her direct exchanges; Bob never sees them.
    assert any("PIN" in t for t in recalled("dm-alice-2", "alice", "what is my bank PIN reminder about my dog?"))
    bob = recalled("dm-bob-2", "bob", "what is my bank PIN reminder about my dog?")
    assert not any("PIN" in t for t in bob)
    assert any("vaccination" in t for t in bob)
    # Memory search never returns episodes.
    hits = app.memory.search(SearchQuery("dog Rex", Reach("talker", "dm-alice", "alice"), 10, 0.0)).hits
    assert not [h for h in hits if h.memory.category == "episode"]


@pytest.mark.both_backends
def test_indexing_after_a_restart_neither_skips_nor_duplicates(make: Any) -> None:
    app, rt = make()
    say(rt, "general", "alice", "First: the keys are under the blue flowerpot.")
    say(rt, "general", "alice", "Second: the spare bike lock code is written in my diary.")
    assert rt.learning_idle(30)
    rt.stop(grace=5)
    # A daemon that does not index (as if it crashed before indexing) answers two more.
    app2, rt2 = make("[episodes]\nenabled = false\n")
    say(rt2, "general", "alice", "Third: the boiler manual is in the kitchen drawer.")
    say(rt2, "general", "bob", "Fourth: the router password is on its underside.")
    rt2.stop(grace=5)
    # The next start catches up: every exchange once.
    app3, rt3 = make("[episodes]\nbatch_size = 1\n")
    assert wait_for(lambda: len(episodes_in(app3, Scope.episodes(Scope.channel("general")))) >= 4, 30, "catch-up")
    assert rt3.learning_idle(30)
    found = episodes_in(app3, Scope.episodes(Scope.channel("general")))
    sources = sorted(m.source_message_id or 0 for m in found)
    with app3.store.read() as conn:
        asked = [m.id for m in app3.store.messages.after(conn, "general", 0, 100) if m.role == "user"]
    assert sources == asked
    # And a start with nothing left adds nothing.
    rt3.stop(grace=5)
    app4, rt4 = make()
    assert rt4.learning_idle(30)
    assert len(episodes_in(app4, Scope.episodes(Scope.channel("general")))) == 4


def test_retention_keeps_the_newest_episodes_per_scope(make: Any) -> None:
    app, rt = make("[episodes]\nmax_per_scope = 2\n")
    for line in FILLER[:4]:
        say(rt, "general", "alice", line)
    assert rt.learning_idle(30)
    kept = episodes_in(app, Scope.episodes(Scope.channel("general")))
    assert [m.text.split("\n")[0] for m in kept] == [f"alice: {FILLER[3]}", f"alice: {FILLER[2]}"]


def test_keep_user_indexes_the_message_alone_and_the_reply_as_context(make: Any) -> None:
    app, rt = make('[episodes]\nkeep = "user"\n')
    say(rt, "general", "alice", "The blue folder holds the lease agreement.")
    assert rt.learning_idle(30)
    (episode,) = episodes_in(app, Scope.episodes(Scope.channel("general")))
    assert episode.text == "alice: The blue folder holds the lease agreement."
    assert episode.metadata["context"].startswith("talker: ")


@pytest.mark.slow
def test_a_reply_is_not_delayed_by_a_slow_indexing_embedder(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedder hangs on the indexing call: ``done`` has already arrived, and the episode
    comes once the embedder answers. A daemon stopped mid-batch writes nothing, and the next
    start indexes that exchange once."""
    monkeypatch.setenv("FAKE_OPENAI_KEY", "test-key")
    # No automatic retrieval: the only embedding calls are the dimension probe and indexing.
    config = embedding_config(fake_openai) + "[memory]\nauto_retrieve = false\n"
    home = write_home(tmp_path / "home", config, {"talker": TALKER})
    fake_openai.queue_embeddings(EmbeddingFault("ok"), EmbeddingFault("hang"))
    app = App(load_config(home, environ={}))
    rt = Runtime(app)
    try:
        events = list(rt.chat("talker", "general", "alice", "The spare key is with Mrs Olsen.", timeout=60))
        assert isinstance(events[-1], Done)
        wait_for(lambda: fake_openai.hanging, 30, "the indexing call to reach the embedder")
        assert not episodes_in(app, Scope.episodes(Scope.channel("general")))
    finally:
        rt.stop(grace=2)
    fake_openai.release()
    app.close()
    app2 = App(load_config(home, environ={}))
    rt2 = Runtime(app2)
    try:
        assert rt2.learning_idle(30)
        found = episodes_in(app2, Scope.episodes(Scope.channel("general")))
        assert [m.text.split("\n")[0] for m in found] == ["alice: The spare key is with Mrs Olsen."]
    finally:
        rt2.stop(grace=2)
        app2.close()


def test_the_config_section_is_validated(tmp_path: Path) -> None:
    home = write_home(tmp_path, '[episodes]\nkeep = "everything"\n')
    with pytest.raises(ConfigError, match="keep") as info:
        load_config(home, environ={})
    assert "episodes" in str(info.value)


def test_an_answer_resumed_after_an_interrupted_one_is_indexed_with_the_complete_reply(make: Any) -> None:
    """A reply cut off (kept as ``interrupted``) and answered again later: the episode is the
    message with its complete reply, and a message still pending holds the cursor."""
    app, runtime = make()
    # The runtime's indexer catches up (in its thread) with what is behind at its start: let it
    # finish before writing, so only the call below indexes these.
    assert runtime.learning_idle(30)
    store = app.store
    with store.write() as conn:
        asked = store.messages.add(
            conn,
            channel="general",
            role="user",
            author="alice",
            persona="talker",
            content="Remind me: the plumber comes on Tuesday.",
            status="answered",
        )
        for status, text in (("interrupted", "Noted, the plu"), ("complete", "Noted, the plumber comes Tuesday.")):
            store.messages.add(
                conn,
                channel="general",
                role="assistant",
                author="talker",
                persona="talker",
                content=text,
                status=status,
                reply_to=asked.id,
            )
        store.messages.add(
            conn,
            channel="general",
            role="user",
            author="alice",
            persona="talker",
            content="And the electrician?",
            status="pending",
        )
    # Nothing nudged the runtime's worker (these were written directly): index as it does.
    assert Episodes(store, app.memory, app.config.episodes).index("general") == 1
    (episode,) = episodes_in(app, Scope.episodes(Scope.channel("general")))
    # The reply is the episode's indexed context ([episodes] keep = "user"): the complete one.
    assert episode.metadata["context"].endswith("talker: Noted, the plumber comes Tuesday.")
    with store.read() as conn:
        assert store.cursors.get(conn, "episodes", "general") == asked.id


def test_a_message_sent_with_disable_memory_is_not_kept_as_an_episode(make: Any) -> None:
    app, rt = make()
    events = list(rt.chat("talker", "general", "alice", "Off the record: I dislike the new logo.", disable_memory=True))
    assert isinstance(events[-1], Done)
    say(rt, "general", "alice", "On the record: the launch is on Friday.")
    assert rt.learning_idle(30)
    kept = episodes_in(app, Scope.episodes(Scope.channel("general")))
    assert [m.text.split("\n")[0] for m in kept] == ["alice: On the record: the launch is on Friday."]


@pytest.mark.both_backends
@pytest.mark.parametrize("start", [0, 7])
def test_of_two_workers_finishing_the_same_batch_only_the_first_moves_the_cursor(app: App, start: int) -> None:
    """Two daemons on one database finish the same batch at once: the second one's compare-and-set,
    blocked until the first commits, finds the cursor moved and writes nothing."""
    store = app.store
    if start:
        with store.write() as conn:
            assert store.cursors.advance(conn, "episodes", "general", 0, start)
    moved: dict[str, bool] = {}
    first_holds, release = threading.Event(), threading.Event()

    def first() -> None:
        with store.write() as conn:
            moved["first"] = store.cursors.advance(conn, "episodes", "general", start, start + 5)
            first_holds.set()
            release.wait(30)

    def second() -> None:
        with store.write() as conn:
            moved["second"] = store.cursors.advance(conn, "episodes", "general", start, start + 5)

    one = threading.Thread(target=first)
    one.start()
    assert first_holds.wait(30)
    two = threading.Thread(target=second)
    two.start()
    if store.engine.dialect.name == "postgresql":  # the second is waiting for the first's row or key lock
        query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        with store.engine.connect() as watcher:

            def blocked() -> bool:
                try:
                    return bool(watcher.exec_driver_sql(query).scalar_one() >= 1)
                finally:
                    watcher.rollback()  # pg_stat_activity is read once per transaction: look again

            wait_for(blocked, 30, "the second worker to block")
    release.set()
    one.join(30)
    two.join(30)
    assert moved == {"first": True, "second": False}
    with store.read() as conn:
        assert store.cursors.get(conn, "episodes", "general") == start + 5


def test_the_scan_pages_through_the_channel_and_stops_at_the_first_pending_message(app: App) -> None:
    """exchanges() reads the channel in growing pages: every finished exchange before the first
    pending message, in order, up to the limit, however many pages that takes."""
    from agentd.memory.episodes import exchanges

    store = app.store
    finished: list[int] = []
    with store.write() as conn:

        def add(role: str, text: str, status: str, reply_to: int | None = None) -> int:
            author = "alice" if role == "user" else "talker"
            return store.messages.add(
                conn,
                channel="general",
                role=role,
                author=author,
                persona="talker",
                content=text,
                status=status,
                reply_to=reply_to,
            ).id

        for i in range(40):  # far more than the first page; every seventh turn failed
            asked = add("user", f"message {i}", "failed" if i % 7 == 3 else "answered")
            if i % 7 != 3:
                add("assistant", f"reply {i}", "complete", asked)
            finished.append(asked)
        held = add("user", "still waiting", "pending")
        for i in range(5):  # answered after the pending one: not reached
            add("assistant", f"late reply {i}", "complete", add("user", f"later {i}", "answered"))

    answered = [m for i, m in enumerate(finished) if i % 7 != 3]
    found, cursor = exchanges(store, "general", 0, 1000)
    assert [e.message.id for e in found] == answered
    assert [e.reply.content for e in found] == [f"reply {i}" for i in range(40) if i % 7 != 3]
    assert cursor == finished[-1] < held
    found, cursor = exchanges(store, "general", 0, 20)
    assert [e.message.id for e in found] == answered[:20]
    assert cursor == answered[19]
    found, cursor = exchanges(store, "general", answered[19], 1000)
    assert [e.message.id for e in found] == answered[20:]
    assert cursor == finished[-1]
    assert exchanges(store, "general", finished[-1], 1000) == ([], finished[-1])
