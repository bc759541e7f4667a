"""Recent history kept between turns gives exactly what reading the store gives."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from agentd.app import App
from agentd.prompt.builder import ContextBuilder
from agentd.store import Store

pytestmark = pytest.mark.both_backends


def add(store: Store, channel: str, n: int, start: int = 0, unanswered: frozenset[int] = frozenset()) -> list[int]:
    """``n`` messages alternating user / assistant (a user message at each index in ``unanswered``
    is followed by another user message); their ids."""
    ids = []
    with store.write() as conn:
        for i in range(start, start + n):
            role = "user" if i % 2 == 0 or (i - 1) in unanswered else "assistant"
            msg = store.messages.add(
                conn,
                channel=channel,
                role=role,
                author=f"u{i % 3}",
                content=f"message {i} in {channel}",
                status="answered",
            )
            ids.append(msg.id)
    return ids


def test_kept_history_is_what_the_store_holds_after_every_write_whoever_wrote_it(app: App) -> None:
    persona = app.personas["buddy"]
    counter = app.builder.counter(persona)
    kept = ContextBuilder(app.store, app.config, app.windows, lambda _m: counter)
    fresh = ContextBuilder(app.store, app.config, app.windows, lambda _m: counter, history_rows=0)
    pages: list[str] = []

    @sa.event.listens_for(app.store.engine, "before_cursor_execute")
    def _seen(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
        if "ORDER BY id DESC LIMIT" in statement and "id > " not in statement:
            pages.append(statement)

    def same(before_id: int | None, budget: int = 100_000) -> None:
        for before_user in (True, False):
            got = kept.history("room", before_id, counter, budget, before_user=before_user)
            assert got == fresh.history("room", before_id, counter, budget, before_user=before_user)

    ids = add(app.store, "room", 450, unanswered=frozenset({40, 41, 300}))
    same(None)
    same(ids[-1])
    same(ids[100])  # an older message (answered late): fewer rows than kept
    same(ids[-1], budget=300)  # a small window: a few rows
    # Another process writes to the channel (the CLI, another daemon on the same file), and
    # this one writes to another channel in between.
    other = Store.open(app.store.url)
    try:
        later = add(other, "room", 7, start=450)
    finally:
        other.close()
    add(app.store, "elsewhere", 3)
    later += add(app.store, "room", 2, start=457)
    same(later[-1])
    same(later[3])
    same(None)
    if app.store.backend == "sqlite":
        pages.clear()
        more = add(app.store, "room", 2, start=459)
        kept.history("room", more[-1], counter, 100_000, before_user=True)
        assert pages == []  # only what was said since the last turn was read


def test_kept_rows_are_bounded_and_a_dropped_channel_is_read_again(app: App) -> None:
    persona = app.personas["buddy"]
    counter = app.builder.counter(persona)
    kept = ContextBuilder(app.store, app.config, app.windows, lambda _m: counter, history_rows=250)
    fresh = ContextBuilder(app.store, app.config, app.windows, lambda _m: counter, history_rows=0)
    add(app.store, "a", 200)
    add(app.store, "b", 200)
    for channel in ("a", "b", "a", "b"):
        assert kept.history(channel, None, counter, 100_000) == fresh.history(channel, None, counter, 100_000)
        assert kept.kept_history_rows <= 250


def test_kept_history_is_read_afresh_after_a_person_is_forgotten_by_another_process(app: App) -> None:
    persona = app.personas["buddy"]
    counter = app.builder.counter(persona)
    kept = ContextBuilder(app.store, app.config, app.windows, lambda _m: counter)
    fresh = ContextBuilder(app.store, app.config, app.windows, lambda _m: counter, history_rows=0)
    add(app.store, "room", 30)
    before, _ = kept.history("room", None, counter, 100_000)
    assert any(item.author == "u1" and item.role == "user" for item in before)
    other = Store.open(app.store.url)  # the CLI's `agentd user forget`, while the daemon serves
    try:
        assert other.forget_user("u1").messages == 5
    finally:
        other.close()
    after = kept.history("room", None, counter, 100_000)
    assert not any(item.author == "u1" and item.role == "user" for item in after[0])
    assert after == fresh.history("room", None, counter, 100_000)
