"""A channel's feed costs one store read and one encoding per event, however many follow it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import sqlalchemy as sa

from tests.conftest import BUDDY
from tests.support import Running, follow, wait_for

FOLLOWERS = 40


def test_many_followers_share_one_read_and_get_every_message_once_in_order(daemons: Any) -> None:
    d: Running = daemons('[channels.general]\npersonas = ["buddy"]\n', personas={"buddy": BUDDY})
    reads: list[str] = []

    @sa.event.listens_for(d.app.store.engine, "before_cursor_execute")
    def _seen(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
        if "FROM messages" in statement and "messages.id >" in statement:
            reads.append(statement)

    def done(n: int) -> Any:
        return lambda events: sum(e.event == "done" for e in events) >= n

    with httpx.Client(base_url=d.url, timeout=60, limits=httpx.Limits(max_connections=FOLLOWERS + 10)) as many:
        followers = [follow(many, "general", until=done(3)) for _ in range(FOLLOWERS)]
        wait_for(lambda: all(f.ready.is_set() for f, _t in followers), 60, "every follower connected")
        reads.clear()
        for i in range(3):
            r = d.client.post("/v1/channels/general/messages", json={"user": f"u{i}", "text": f"hello number {i}"})
            assert r.status_code == 202
        for _follower, thread in followers:
            thread.join(60)
    # Each follower got every message once, in id order, each user message before its turn's done.
    for follower, _thread in followers:
        events = follower.snapshot()
        ids = [int(e.id) for e in events if e.event == "message"]
        assert len(ids) == 6, ids
        assert ids == sorted(set(ids)), ids
        assert sum(e.event == "done" for e in events) == 3
        first_done = next(i for i, e in enumerate(events) if e.event == "done")
        assert any(e.event == "message" and e.data["role"] == "assistant" for e in events[:first_done])
    # Reads of new messages: a few per post and turn for the channel (15 on a quiet machine, 18 seen
    # once on a loaded one, where wake-ups coalesce less), not one per follower per message (240).
    assert len(reads) < FOLLOWERS, len(reads)


def test_followers_are_bounded_per_channel_and_per_key(daemons: Any) -> None:
    d: Running = daemons(
        '[daemon]\nmax_followers_per_channel = 3\nmax_followers_per_key = 5\n[channels.general]\npersonas = ["buddy"]\n'
        '[channels.other]\npersonas = ["buddy"]\n',
        personas={"buddy": BUDDY},
    )
    with httpx.Client(base_url=d.url, timeout=60, limits=httpx.Limits(max_connections=20)) as many:
        held = [follow(many, "general") for _ in range(3)]
        wait_for(lambda: all(f.ready.is_set() for f, _t in held), 60, "three followers of general")
        with many.stream("GET", "/v1/channels/general/events") as refused:  # headers first: never hangs
            assert refused.status_code == 429
            assert json.loads(refused.read())["error"]["code"] == "too_many_followers"
        # Another channel: the key's bound (5) is met after two more.
        more = [follow(many, "other") for _ in range(2)]
        wait_for(lambda: all(f.ready.is_set() for f, _t in more), 60, "two followers of other")
        with many.stream("GET", "/v1/channels/other/events") as by_key:
            assert by_key.status_code == 429
            assert "max_followers_per_key" in by_key.read().decode()
        assert d.client.get("/healthz").status_code == 200
