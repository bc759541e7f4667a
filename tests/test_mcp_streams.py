"""``GET /mcp`` event streams are followers: counted against ``[daemon] max_followers_per_channel``
and ``max_followers_per_key`` with the channel feeds, refused to a metrics key, and ended when the
daemon stops, so that holding many of them cannot take every connection the daemon keeps
(once, 800 of them and ``/healthz``, ``/v1/chat`` and ``/v1/personas`` went unanswered)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import httpx

from agentd.api.keys import KeyBook
from tests.support import Running, follow, wait_for

#: The daemon keeps 12 connections; a key may hold 5 streams, a channel 3.
CONFIG = "[daemon]\nmax_connections = 12\nmax_followers_per_channel = 3\nmax_followers_per_key = 5\n"
SSE = {"Accept": "text/event-stream"}


def _refused(client: httpx.Client, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """A stream's status and error, read as a stream (a stream let in would never end: never hangs)."""
    with client.stream("GET", path, headers={**SSE, **headers}) as answer:
        if answer.status_code == 200:
            return 200, {}
        return answer.status_code, json.loads(answer.read())["error"]


def _open(
    stack: contextlib.ExitStack, client: httpx.Client, headers: dict[str, str], path: str = "/mcp"
) -> httpx.Response:
    """Open a stream and keep it open until ``stack`` closes (its status and headers are read)."""
    return stack.enter_context(client.stream("GET", path, headers={**SSE, **headers}))


def test_mcp_streams_count_as_followers_and_leave_the_daemon_answering(daemons: Any) -> None:
    d: Running = daemons(CONFIG)
    book = KeyBook(d.app.store)
    admin = {"Authorization": f"Bearer {book.create('admin', 'ops').token}"}
    metrics = {"Authorization": f"Bearer {book.create('metrics', 'prometheus').token}"}

    status, error = _refused(d.client, "/mcp", metrics)
    assert status == 403, error
    assert error["code"] == "forbidden"
    assert "metrics" in error["message"]
    assert _refused(d.client, "/v1/channels/general/events", metrics)[0] == 403  # as on /events

    with httpx.Client(base_url=d.url, timeout=60) as many, contextlib.ExitStack() as stack:
        # Three streams on the default channel ("mcp"): the channel's bound.
        for _ in range(3):
            assert _open(stack, many, admin).status_code == 200
        status, error = _refused(many, "/mcp", admin)
        assert status == 429, error
        assert error["code"] == "too_many_followers"
        assert "max_followers_per_channel" in error["message"]
        # A channel feed and an MCP stream of the session's channel: the key's bound (5) is met.
        feed, _thread = follow(many, "general", headers=admin)
        wait_for(feed.ready.is_set, 60, "the feed to start")
        assert _open(stack, many, admin, "/mcp?channel=other").status_code == 200
        for path in ("/mcp?channel=third", "/v1/channels/third/events"):
            status, error = _refused(many, path, admin)
            assert status == 429, (path, error)
            assert error["code"] == "too_many_followers"
            assert "max_followers_per_key" in error["message"]
        # The limit's worth of streams is open; the daemon still answers everyone else.
        assert d.client.get("/healthz").status_code == 200
        assert d.client.get("/v1/personas", headers=admin).status_code == 200
        chat = {"persona": "fake", "channel": "general", "user": "alice", "message": "still there?"}
        with d.client.stream("POST", "/v1/chat", json=chat, headers=admin) as answer:
            assert answer.status_code == 200
            assert b"event: done" in answer.read()
    # Closed streams free their places.
    with httpx.Client(base_url=d.url, timeout=60) as again, contextlib.ExitStack() as stack:
        assert _open(stack, again, admin).status_code == 200


def test_the_daemon_ends_mcp_streams_when_it_stops(daemons: Any) -> None:
    d: Running = daemons(CONFIG)
    with httpx.Client(base_url=d.url, timeout=60) as client, client.stream("GET", "/mcp", headers=SSE) as stream:
        assert stream.status_code == 200
        d.server.request_stop()
        # The body ends (not a broken connection) once the daemon shuts down.
        for _chunk in stream.iter_bytes():
            pass
    d.thread.join(60)
    assert not d.thread.is_alive()
