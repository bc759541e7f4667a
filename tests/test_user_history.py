"""User history recall through the runtime and the store, with the offline model.

What the persona was given is read back from public surfaces: the events of the
turn, the stored context record and the stored ``user_history`` system message.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.access.scopes import Scope
from agentd.app import App
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from agentd.recall.earlier import EarlierExchanges, condense, seeded_query
from agentd.runtime import Done, Event, HistoryContext, MemoryContext, Runtime
from tests.conftest import agentd_cli, write_home

OFFLINE = """
name = "buddy"
model = "offline"
max_reply_tokens = 128
context_window = 1024
skills = []
system_prompt = "You are buddy."
"""


@pytest.fixture
def make_runtime(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[Any]:
    """A Runtime on an App with the offline persona ``buddy``; ``config`` is extra TOML."""
    made: list[tuple[App, Runtime]] = []

    def build(config: str = "[history]\nrecent_window = 0\n") -> Runtime:
        home = write_home(tmp_path / f"home{len(made)}", config, {"buddy": OFFLINE})
        app = App(load_config(home, environ={}), embedder=embedder)
        rt = Runtime(app)
        made.append((app, rt))
        return rt

    yield build
    for app, rt in made:
        rt.stop(grace=5)
        app.close()


def say(rt: Runtime, text: str, user: str = "alice", channel: str = "general") -> list[Event]:
    return list(rt.chat("buddy", channel, user, text))


FILLER = "The river valley weather stayed mild while farmers repaired fences near the old mill. " * 6


def pad(rt: Runtime, turns: int = 6, user: str = "alice", channel: str = "general") -> None:
    """Turns of long unrelated chatter, so earlier messages fall out of the small window's history."""
    for _ in range(turns):
        say(rt, FILLER, user=user, channel=channel)


def history_event(events: list[Event]) -> HistoryContext:
    (event,) = [e for e in events if isinstance(e, HistoryContext)]
    return event


def memories(events: list[Event]) -> list[str]:
    (event,) = [e for e in events if isinstance(e, MemoryContext)]
    return [m.text for m in event.memories]


def context_record(rt: Runtime, events: list[Event]) -> dict[str, Any]:
    done = events[-1]
    assert isinstance(done, Done)
    app: App = rt._app  # noqa: SLF001 - the test reads the record the runtime stored
    with app.store.read() as conn:
        record = app.store.contexts.for_message(conn, done.message_id)
    assert record is not None
    return record.data


KYOTO = "Alice is travelling to Kyoto in April and wants quiet Zen temples"


def test_a_sparse_follow_up_finds_the_memory_the_earlier_exchange_points_to(make_runtime) -> None:
    rt = make_runtime()
    asked = say(rt, "I am planning my Kyoto trip for next spring, can you suggest one temple?")[-1]
    assert isinstance(asked, Done)
    # Learned in this (shared) channel, so it may be recalled here.
    rt._app.memory.add(  # noqa: SLF001
        "buddy", Scope.user("alice"), KYOTO, "travel", source_message_id=asked.user_message_id
    )
    pad(rt)
    events = say(rt, "and what about the second one?")
    assert memories(events) == [KYOTO]
    event = history_event(events)
    assert [s.user for s in event.snippets] == [
        "I am planning my Kyoto trip for next spring, can you suggest one temple?"
    ]
    assert event.snippets[0].assistant  # paired with the assistant's reply
    assert list(event.seeds) == ["planning", "kyoto", "trip", "next", "spring"]
    record = context_record(rt, events)
    assert record["user_history"]["seeds"] == ["planning", "kyoto", "trip", "next", "spring"]
    types = [e.type for e in events]
    assert types.index("history_context") < types.index("token_delta")


@pytest.mark.parametrize(
    "config",
    [
        "[history]\nrecent_window = 0\nenabled = false\n",
        "[history]\nrecent_window = 0\n[history.tuning]\nseed_sparse_below = 0\n",
    ],
    ids=["history-off", "seeds-off"],
)
def test_without_the_seeds_the_sparse_follow_up_finds_nothing(make_runtime, config: str) -> None:
    rt = make_runtime(config)
    rt._app.memory.add("buddy", Scope.user("alice"), KYOTO, "travel")  # noqa: SLF001
    say(rt, "I am planning my Kyoto trip for next spring, can you suggest one temple?")
    pad(rt)
    events = say(rt, "and what about the second one?")
    assert memories(events) == []


def test_the_recalled_exchange_is_injected_as_one_tagged_system_message_and_stored(make_runtime) -> None:
    rt = make_runtime()
    say(rt, "My favourite database is SQLite because it is a single file")
    pad(rt)
    events = say(rt, "why did I say SQLite was my favourite database?")
    record = context_record(rt, events)
    app: App = rt._app  # noqa: SLF001
    done = events[-1]
    assert isinstance(done, Done)
    with app.store.read() as conn:
        stored = [
            m
            for m in app.store.messages.recent(conn, "general", 50, roles=("system",))
            if m.source == "user_history" and m.reply_to == done.user_message_id
        ]
    assert len(stored) == 1
    assert "My favourite database is SQLite because it is a single file" in stored[0].content
    assert record["budget"]["user_history_tokens"] > 0
    assert record["user_history"]["message_ids"]


def test_nothing_is_injected_when_nothing_matches(make_runtime) -> None:
    rt = make_runtime()
    say(rt, "My favourite database is SQLite")
    events = say(rt, "Explain quantum entanglement")
    assert history_event(events).snippets == ()
    assert history_event(events).seeds == ()
    record = context_record(rt, events)
    assert record["budget"]["user_history_tokens"] == 0
    assert record["user_history"]["message_ids"] == []


def recall_in(app: App, query: str, channel: str = "c", user: str = "alice") -> list[str]:
    return [
        e.user_text
        for e in EarlierExchanges(app.store, app.config.history).recall(channel, user, query, None).exchanges
    ]


def post(
    app: App, content: str, author: str = "alice", channel: str = "c", role: str = "user", source: str = "chat"
) -> int:
    with app.store.write() as conn:
        return app.store.messages.add(
            conn,
            channel=channel,
            role=role,
            author=author,
            persona="buddy",
            content=content,
            status="answered",
            source=source,
        ).id


@pytest.fixture
def history_app(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[Any]:
    apps: list[App] = []

    def build(history: str = "recent_window = 0") -> App:
        home = write_home(tmp_path / f"h{len(apps)}", f"[history]\n{history}\n", {"buddy": OFFLINE})
        apps.append(App(load_config(home, environ={}), embedder=embedder))
        return apps[-1]

    yield build
    for app in apps:
        app.close()


def test_other_users_messages_are_never_candidates(history_app) -> None:
    app = history_app()
    post(app, "the secret project is called Nightingale", author="bob")
    assert recall_in(app, "what is the secret project called Nightingale?", user="alice") == []
    assert recall_in(app, "what is the secret project called Nightingale?", user="bob") == [
        "the secret project is called Nightingale"
    ]


def test_another_channel_is_never_searched(history_app) -> None:
    app = history_app()
    post(app, "my private salary figure is 90000", channel="dm-alice")
    assert recall_in(app, "what is my private salary figure?", channel="general") == []


def test_system_tool_and_empty_messages_are_never_candidates(history_app) -> None:
    app = history_app()
    post(app, "Bluebird launch codename notes", role="system", source="user_history")
    post(app, "Bluebird launch codename result", role="tool")
    post(app, "Bluebird launch codename answer", role="assistant")
    post(app, "   ")
    post(app, "remember the Bluebird launch codename")
    assert recall_in(app, "Bluebird launch codename?") == ["remember the Bluebird launch codename"]


def test_messages_inside_the_recent_window_are_not_candidates(history_app) -> None:
    app = history_app("recent_window = 3")
    post(app, "the launch codename is Bluebird")
    post(app, "ok", role="assistant")
    post(app, "filler")
    assert recall_in(app, "launch codename Bluebird?") == []  # all three are recent: in the prompt anyway
    post(app, "more filler")
    assert recall_in(app, "launch codename Bluebird?") == ["the launch codename is Bluebird"]


def test_newest_first_up_to_max_snippets(history_app) -> None:
    app = history_app("recent_window = 0\nmax_snippets = 2")
    for n in range(4):
        post(app, f"garden tomato plan number {n}")
    assert recall_in(app, "garden tomato?") == ["garden tomato plan number 3", "garden tomato plan number 2"]


def test_a_literal_substring_match_is_kept_even_below_the_overlap_threshold(tmp_path, embedder) -> None:
    home = write_home(
        tmp_path, "[history]\nrecent_window = 0\n[history.tuning]\nmin_overlap_ratio = 1.0\n", {"buddy": OFFLINE}
    )
    app = App(load_config(home, environ={}), embedder=embedder)
    try:
        with app.store.write() as conn:
            app.store.messages.add(
                conn, channel="c", role="user", author="alice", persona="buddy", content="pineapple", status="answered"
            )
            app.store.messages.add(
                conn, channel="c", role="user", author="alice", persona="buddy", content="apple pie", status="answered"
            )
        history = EarlierExchanges(app.store, app.config.history)
        query = "tell me about pineapple pizza toppings and crust options"
        # one shared word of seven: far below a ratio of 1.0, but "pineapple" is a literal substring
        found = history.recall("c", "alice", query, None)
        assert [e.user_text for e in found.exchanges] == ["pineapple"]
        assert found.inspected == 2
    finally:
        app.close()


def test_seeds_are_deduplicated_case_insensitively(tmp_path, embedder) -> None:
    home = write_home(tmp_path, "[history]\nrecent_window = 0\n", {"buddy": OFFLINE})
    app = App(load_config(home, environ={}), embedder=embedder)
    try:
        with app.store.write() as conn:
            for text in ["Rust RUST rust compiler Compiler", "rust Borrow checker borrow"]:
                app.store.messages.add(
                    conn, channel="c", role="user", author="alice", persona="buddy", content=text, status="answered"
                )
        found = EarlierExchanges(app.store, app.config.history).recall("c", "alice", "rust help", None)
        assert list(found.seeds) == ["borrow", "checker", "compiler"]
    finally:
        app.close()


def test_inspection_is_bounded_by_max_inspected(tmp_path, embedder) -> None:
    home = write_home(
        tmp_path, "[history]\nrecent_window = 0\n[history.tuning]\nmax_inspected = 5\n", {"buddy": OFFLINE}
    )
    app = App(load_config(home, environ={}), embedder=embedder)
    try:
        with app.store.write() as conn:
            app.store.messages.add(
                conn,
                channel="c",
                role="user",
                author="alice",
                persona="buddy",
                content="the zebra topic",
                status="answered",
            )
            for i in range(20):
                app.store.messages.add(
                    conn,
                    channel="c",
                    role="user",
                    author="alice",
                    persona="buddy",
                    content=f"unrelated chatter {i}",
                    status="answered",
                )
        found = EarlierExchanges(app.store, app.config.history).recall("c", "alice", "zebra topic", None)
        assert found.inspected == 5
        assert found.exchanges == ()  # the match is older than the newest five
    finally:
        app.close()


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("我们明天去公园散步好不好", 6, "我们明天去…"),
        ("👨‍👩‍👧‍👦👍🏽🇯🇵 family", 10, "👨‍👩‍👧‍👦👍🏽…"),
        ("short", 10, "short"),
        ("  spaced   out\ntext  ", 40, "spaced out text"),
    ],
)
def test_condense_counts_characters_and_never_splits_cjk_or_emoji(text: str, limit: int, expected: str) -> None:
    assert condense(text, limit) == expected


def test_cjk_history_is_matched_and_cut_to_the_rune_limit(tmp_path, embedder) -> None:
    home = write_home(tmp_path, "[history]\nrecent_window = 0\nmax_snippet_chars = 16\n", {"buddy": OFFLINE})
    app = App(load_config(home, environ={}), embedder=embedder)
    try:
        long = "我们明天去公园散步，然后去博物馆看展览，晚上一起吃火锅"
        with app.store.write() as conn:
            app.store.messages.add(
                conn, channel="c", role="user", author="alice", persona="buddy", content=long, status="answered"
            )
        found = EarlierExchanges(app.store, app.config.history).recall("c", "alice", "公园散步怎么样", None)
        (exchange,) = found.exchanges
        assert len(exchange.user_text) <= 16
        assert exchange.user_text.endswith("…")
        assert long.startswith(exchange.user_text[:-1])
    finally:
        app.close()


@pytest.mark.slow
def test_budget_cli_shows_the_user_history_section(tmp_path) -> None:
    config = write_home(tmp_path, "[history]\nrecent_window = 0\n", {"buddy": OFFLINE})
    lines = ["My favourite database is SQLite", *[FILLER] * 6]
    chat = agentd_cli(
        "chat", "buddy", "--channel", "general", "--user", "alice", config=config, input="\n".join(lines) + "\n"
    )
    assert chat.returncode == 0, chat.stderr
    result = agentd_cli(
        "budget", "buddy", "--channel", "general", "--user", "alice", "--message", "why SQLite database?", config=config
    )
    assert result.returncode == 0, result.stderr
    assert "user history" in result.stdout
    assert "My favourite database is SQLite" in result.stdout
    as_json = agentd_cli(
        "budget",
        "buddy",
        "--channel",
        "general",
        "--user",
        "alice",
        "--message",
        "why SQLite database?",
        "--json",
        config=config,
    )
    import json

    assert json.loads(as_json.stdout)["user_history_tokens"] > 0
    asked = agentd_cli(
        "chat",
        "buddy",
        "--channel",
        "general",
        "--user",
        "alice",
        "--json",
        "--message",
        "why SQLite database?",
        config=config,
    )
    events = [json.loads(line) for line in asked.stdout.splitlines()]
    (recalled,) = [e for e in events if e["type"] == "history_context"]
    assert recalled["snippets"][0]["user"] == "My favourite database is SQLite"
    shown = agentd_cli("inspect", str(events[-1]["message_id"]), config=config)
    assert shown.returncode == 0, shown.stderr
    assert "past exchanges: messages 1, 2" in shown.stdout


# -- the user-history rules as agentd applies them (README, "How a reply is made") -------------------------------------


def test_an_exact_repeat_matches_although_no_content_word_is_shared(history_app) -> None:
    app = history_app()
    post(app, "what about it")
    post(app, "ok")
    post(app, "tell me about the Kyoto trip")
    history = EarlierExchanges(app.store, app.config.history)
    assert [e.user_text for e in history.recall("c", "alice", "What about it?", None).exchanges] == ["what about it"]
    # A one-word phrase recurs everywhere: "ok" again is not a match.
    assert history.recall("c", "alice", "ok", None).exchanges == ()


def test_seeds_stand_in_for_a_query_without_content_words(history_app) -> None:
    app = history_app()
    post(app, "so what about it, the Kyoto temples in April?")
    recalled = EarlierExchanges(app.store, app.config.history).recall("c", "alice", "what about it", None)
    assert list(recalled.seeds) == ["kyoto", "temples", "april"]
    assert seeded_query("what about it", recalled, 4) == "kyoto temples april"
    assert seeded_query("and the temples?", recalled, 4) == "and the temples? kyoto temples april"
    assert seeded_query("what are the best temples in Kyoto in April?", recalled, 4) == (
        "what are the best temples in Kyoto in April?"
    )


def test_seeds_leave_out_the_words_the_query_already_has(history_app) -> None:
    """As the README says: seeds are the first five new words (not the first five tokens)."""
    app = history_app()
    post(app, "Kyoto trip planning: quiet temples, moss gardens and tofu restaurants")
    recalled = EarlierExchanges(app.store, app.config.history).recall("c", "alice", "the Kyoto trip?", None)
    assert list(recalled.seeds) == ["planning", "quiet", "temples", "moss", "gardens"]


def test_with_the_default_window_an_exchange_the_prompt_lost_is_summarised(make_runtime) -> None:
    """Default [history] settings; the persona's small window loses old turns after a few long ones."""
    rt = make_runtime("")
    say(rt, "My favourite database is SQLite because it is a single file")
    for i in range(5):
        say(rt, f"Turn {i}: " + FILLER)
    events = say(rt, "why did I say SQLite was my favourite database?")
    assert [s.user for s in history_event(events).snippets] == [
        "My favourite database is SQLite because it is a single file"
    ]
    assert context_record(rt, events)["budget"]["user_history_tokens"] > 0


def test_an_exchange_the_prompt_still_carries_is_not_summarised_but_gives_seeds(make_runtime) -> None:
    rt = make_runtime("")
    asked = say(rt, "I am planning my Kyoto trip for next spring, can you suggest one temple?")[-1]
    assert isinstance(asked, Done)
    # Learned in this (shared) channel, so it may be recalled here.
    rt._app.memory.add(  # noqa: SLF001
        "buddy", Scope.user("alice"), KYOTO, "travel", source_message_id=asked.user_message_id
    )
    events = say(rt, "and what about the second one?")
    assert history_event(events).snippets == ()  # the exchange is in the prompt's history
    assert list(history_event(events).seeds) == ["planning", "kyoto", "trip", "next", "spring"]
    assert memories(events) == [KYOTO]
