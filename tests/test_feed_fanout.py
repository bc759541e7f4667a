"""A channel's feed costs one store read and one encoding per event, however many follow it."""

from __future__ import annotations

import json
from typing import Any

import httpx

from agentd.api.feed import PAGE
from tests.conftest import BUDDY
from tests.support import Running, follow, wait_for

FOLLOWERS = 40
POSTS = 3


def test_many_followers_share_one_read_and_get_every_message_once_in_order(daemons: Any) -> None:
    """Counted, not timed: once the followers have caught up, the store is read for the channel exactly once
    per wake-up (a posted message) and once before each ``memory_context``, ``done`` and ``error``, for all
    of them together; a follower that read for itself would add one more."""
    d: Running = daemons('[channels.general]\npersonas = ["buddy"]\n', personas={"buddy": BUDDY})
    hub = d.server.hub
    reads: list[tuple[str, int]] = []
    read = hub.messages_after

    def counted(channel: str, after: int, limit: int = PAGE) -> Any:
        reads.append((channel, after))
        return read(channel, after, limit)

    hub.messages_after = counted  # type: ignore[method-assign]  # the hub's own reads, counted as they are made

    def done(n: int) -> Any:
        return lambda events: sum(e.event == "done" for e in events) >= n

    with httpx.Client(base_url=d.url, timeout=60, limits=httpx.Limits(max_connections=FOLLOWERS + 10)) as many:
        followers = [follow(many, "general", until=done(POSTS)) for _ in range(FOLLOWERS)]
        # Each follower reads the store once to catch up (the channel is empty), then follows the shared reads.
        wait_for(lambda: len(reads) >= FOLLOWERS, 60, "every follower to catch up")
        assert len(reads) == FOLLOWERS, reads
        reads.clear()
        for i in range(POSTS):
            r = d.client.post("/v1/channels/general/messages", json={"user": f"u{i}", "text": f"hello number {i}"})
            assert r.status_code == 202
        for _follower, thread in followers:
            thread.join(60)
    # Each follower got every message once, in id order, each user message before its turn's done.
    for follower, _thread in followers:
        events = follower.snapshot()
        ids = [int(e.id) for e in events if e.event == "message"]
        assert len(ids) == 2 * POSTS, ids
        assert ids == sorted(set(ids)), ids
        assert sum(e.event == "done" for e in events) == POSTS
        first_done = next(i for i, e in enumerate(events) if e.event == "done")
        assert any(e.event == "message" and e.data["role"] == "assistant" for e in events[:first_done])
    read_before = sum(e.event in ("memory_context", "done", "error") for e in followers[0][0].snapshot())
    assert len(reads) == POSTS + read_before, (reads, read_before)


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
