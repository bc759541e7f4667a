"""Connections that do not finish sending a request are closed, and their number is bounded, so
``/healthz`` answers whatever idle or slow clients hold; a request framed two ways is refused."""

from __future__ import annotations

import socket
from typing import Any

from tests.support import Running


def _connect(d: Running) -> socket.socket:
    host, port = d.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` within its 10 s timeout (whatever it sent first)."""
    try:
        while sock.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_connections_that_never_finish_a_request_are_closed(daemons: Any) -> None:
    d: Running = daemons("[daemon]\nheader_timeout_seconds = 0.5\nbody_timeout_seconds = 0.5\n")
    idle = _connect(d)
    half_header = _connect(d)
    half_header.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    short_body = _connect(d)
    short_body.sendall(
        b"POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"persona": '
    )
    after_a_response = _connect(d)  # a second request begun after the first was answered, never finished
    after_a_response.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert b"200 OK" in after_a_response.recv(65536)
    after_a_response.sendall(b"GET /healthz HTTP/1.1\r\nHo")
    for sock in (idle, half_header, short_body, after_a_response):
        with sock:
            assert _closed_by_server(sock)
    assert d.client.get("/healthz").status_code == 200


def test_past_the_bound_the_longest_idle_connection_makes_room(daemons: Any) -> None:
    d: Running = daemons("[daemon]\nmax_connections = 20\nheader_timeout_seconds = 600\n")
    held = [_connect(d) for _ in range(40)]
    try:
        # Every new connection beyond 20 closed one that was waiting: the probe's, too, gets through.
        assert d.client.get("/healthz").status_code == 200
        closed = sum(_closed_by_server(s) for s in held[:20])
        assert closed == 20  # the oldest, well before their 600 s deadline
    finally:
        for s in held:
            s.close()
    # A follower (a request in flight) is never the one closed.
    with d.client.stream("GET", "/v1/channels/general/events") as feed:
        assert feed.status_code == 200
        more = [_connect(d) for _ in range(25)]
        try:
            assert d.client.get("/healthz").status_code == 200
            assert not feed.is_closed
        finally:
            for s in more:
                s.close()


def test_a_request_with_both_content_length_and_transfer_encoding_is_refused_and_its_connection_closed(
    daemons: Any,
) -> None:
    d: Running = daemons()
    smuggled = b"GET /v1/personas HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    body = b"0\r\n\r\n" + smuggled
    with _connect(d) as sock:
        sock.sendall(
            b"POST /v1/memory/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n".encode()
            + b"Transfer-Encoding: chunked\r\n\r\n"
            + body
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1, answer  # the request in the body was not served
    assert b"connection: close" in answer.lower()
