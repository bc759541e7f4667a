"""Odd input over real HTTP: a 4xx naming the field (never a 500), connections that stay
usable after any error, SSE frames no text can split, and the Host check."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from agentd.api.guard import allowed_hosts, host_name
from tests.support import read_sse
from tests.support.fakeopenai import Turn

BIG = 2**63


def raw_exchange(url: str, requests: list[bytes]) -> list[bytes]:
    """Send each request on ONE keep-alive connection; return each raw response."""
    host, port = url.removeprefix("http://").split(":")
    answers = []
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        reader = sock.makefile("rb")
        for request in requests:
            sock.sendall(request)
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                chunk = reader.readline()
                assert chunk, f"the server closed the connection before answering {request[:60]!r}"
                head += chunk
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            answers.append(head + reader.read(length))
    return answers


def request(method: str, path: str, body: bytes = b"", host: str = "127.0.0.1") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


ODD = [
    ("DELETE", f"/v1/memories/{BIG}", None, "memory_id"),
    ("DELETE", "/v1/memories/-1", None, "memory_id"),
    ("GET", f"/v1/memories?persona=fake&offset={BIG}", None, "offset"),
    ("GET", f"/v1/channels/general/messages?after={BIG}", None, "after"),
    ("GET", f"/v1/channels/general/events?after={BIG}", None, "after"),
    ("POST", "/v1/channels/general/messages", b'{"user": "a", "text": "x\\ud800y"}', "text"),
    ("POST", "/v1/channels/general/messages", b'{"user": "a\\u0000", "text": "hi"}', "user"),
    ("POST", "/v1/channels/general/messages", b'{"user": "a", "text": "x\\u0000y"}', "text"),
    ("POST", "/v1/chat", b'{"persona": "fake", "channel": "general", "user": "a", "message": "\\udfff"}', "message"),
    ("POST", "/v1/memories", b'{"persona": "fake", "text": "hi", "metadata": {"k": "\\ud83d"}}', "metadata"),
    (
        "POST",
        "/v1/memories",
        b'{"persona": "fake", "text": "hi", "created_at": "0001-01-01T00:00:00+01:00"}',
        "created_at",
    ),
    ("POST", "/v1/memory/search", b'{"query": "a\\u0000", "persona": "fake"}', "query"),
    ("POST", "/v1/memories/import", b'{"persona": "fake", "memories": [{"text": "\\ud800"}]}', "memories.0"),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), ODD, ids=[f"{m} {p[:40]}" for m, p, _b, _f in ODD])
def test_odd_values_are_a_4xx_naming_the_field(daemons, method, path, body, field) -> None:
    d = daemons()
    response = d.client.request(method, path, content=body, headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    assert d.client.get("/healthz").status_code == 200  # and the daemon is fine
    with d.app.store.read() as conn:
        assert d.app.store.messages.after(conn, "general", 0) == []  # nothing was stored


def test_last_event_id_beyond_the_id_range_is_refused(daemons) -> None:
    d = daemons()
    response = d.client.get("/v1/channels/general/events", headers={"Last-Event-ID": str(BIG)})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "Last-Event-ID"


def test_the_connection_stays_usable_after_every_kind_of_error(daemons) -> None:
    d = daemons("[daemon]\nmax_body_bytes = 2048\n")
    answers = raw_exchange(
        d.url,
        [
            request("GET", "/v1/nowhere"),  # 404
            request("PUT", "/v1/memories"),  # 405
            request("POST", "/v1/chat", b"{not json"),  # 400
            request("POST", "/v1/chat", b'{"persona": 1}'),  # 422
            request("DELETE", f"/v1/memories/{BIG}"),  # 422 (was a 500)
            request("GET", "/healthz", host="evil.example"),  # 421
            request("POST", "/v1/channels/general/messages", b'{"user": "a", "text": "x\\ud800y"}'),  # 422
            request("GET", "/healthz"),
        ],
    )
    statuses = [int(a.split(b" ", 2)[1]) for a in answers]
    assert statuses == [404, 405, 400, 422, 422, 421, 422, 200]
    for answer in answers:
        assert b"connection: close" not in answer.lower()  # nothing claims a close that does not happen


def test_405_names_every_method_of_the_path(daemons) -> None:
    d = daemons()
    response = d.client.request("PUT", "/v1/memories")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    allowed = {m.strip() for m in response.headers["allow"].split(",")}
    assert {"GET", "POST"} <= allowed
    assert "PUT" not in allowed
    # "import" is not a memory's id: DELETE there is not the route that forgets a memory.
    response = d.client.request("DELETE", "/v1/memories/import")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_sse_data_cannot_be_split_by_the_text_it_carries(daemons, fake_openai) -> None:
    d = daemons('[embedding]\nprovider = "none"\n')
    tricky = "line\u2028separator\u2029paragraph\x85next\x0bvertical\x1cfile end"
    fake_openai.queue(Turn(text=tricky))
    body = {"persona": "fake", "channel": "general", "user": "alice", "message": f"say {tricky}"}
    with d.client.stream("POST", "/v1/chat", json=body) as response:
        raw = response.read()
    for char in ("\u2028", "\u2029", "\x85"):
        assert char.encode() not in raw
    # Even a reader that splits lines the way Python's str.splitlines does gets whole events.
    events = list(read_sse(iter(raw.decode().splitlines())))
    text = "".join(e.data["text"] for e in events if e.event == "token_delta")
    assert text == tricky
    assert events[-1].event == "done"
    assert events[-1].data["text"] == tricky
    with d.client.stream("GET", "/v1/channels/general/events", params={"after": 0}) as feed:
        for event in read_sse(feed.iter_lines()):
            if event.event == "message" and event.data["role"] == "assistant":
                assert event.data["content"] == tricky
                break


def test_requests_for_a_host_the_daemon_does_not_serve_are_refused(daemons) -> None:
    d = daemons()
    for host in ("localhost", "127.0.0.1", "[::1]"):
        assert d.client.get("/healthz", headers={"Host": host}).status_code == 200, host
    refused = d.client.get("/v1/personas", headers={"Host": "attacker.example:8765"})
    assert refused.status_code == 421
    assert refused.json()["error"] == {
        "code": "host_not_allowed",
        "field": "Host",
        "message": refused.json()["error"]["message"],
    }
    assert "attacker.example" in refused.json()["error"]["message"]
    proxied = daemons('[daemon]\nallowed_hosts = ["agentd.example.org", ".internal"]\n')
    for host, status in (("agentd.example.org", 200), ("a.b.internal", 200), ("internal", 200), ("other.org", 421)):
        assert proxied.client.get("/v1/personas", headers={"Host": host}).status_code == status, host


def test_the_allowed_hosts_rules() -> None:
    assert allowed_hosts("127.0.0.1", []) == frozenset({"localhost", "127.0.0.1", "::1"})
    assert allowed_hosts("0.0.0.0", []) is None  # beyond loopback there is an API key
    assert allowed_hosts("127.0.0.1", ["*"]) is None
    assert host_name("[::1]:8765") == "::1"
    assert host_name("Example.ORG:80") == "example.org"
    assert host_name("::1") == "::1"


def test_health_reports_what_it_checks(daemons) -> None:
    d = daemons()
    health = httpx.get(f"{d.url}/healthz", timeout=10).json()
    assert health["status"] == "ok"
    assert health["healthy"] is True
    assert health["store"] == {"writable": True}
    assert json.loads(json.dumps(health))  # plain JSON


def _json_routes(d) -> list[tuple[str, str]]:
    """Every operation the daemon's schema says takes a JSON body, with its path made concrete."""
    schema = d.client.get("/openapi.json").json()
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if "application/json" in (operation.get("requestBody") or {}).get("content", {}):
                found.append((method.upper(), path.replace("{channel}", "general")))
    return found


def _nested(depth: int) -> bytes:
    """A JSON object ``depth`` levels deep (the outer object is level 1)."""
    return b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def test_every_json_route_refuses_a_body_nested_past_the_bound_and_a_body_that_is_not_json(daemons) -> None:
    from agentd.api.body import MAX_JSON_DEPTH

    d = daemons()
    routes = _json_routes(d)
    assert len(routes) >= 6
    assert ("POST", "/v1/memories") in routes
    for method, path in routes:
        for body in (_nested(MAX_JSON_DEPTH + 1), b"[" * 100_000 + b"]" * 100_000):
            response = d.client.request(method, path, content=body, headers={"content-type": "application/json"})
            error = response.json()["error"]
            if path == "/v1/chat/completions":  # OpenAI's shape: 400 invalid_request_error
                assert response.status_code == 400, response.text
                assert error["param"] == "body", response.text
            else:
                assert response.status_code == 422, (path, response.text)
                assert error["field"] == "body", (path, response.text)
            assert error["code"] == "invalid_input"
        plain = d.client.request(method, path, content=b"hello", headers={"content-type": "text/plain"})
        assert plain.status_code == 415, (path, plain.text)
        assert plain.json()["error"]["code"] == "unsupported_media_type"
    # The metadata of the probe (256 levels) is refused at the door, and what is stored stays listable.
    deep = b'{"persona": "fake", "text": "deep", "metadata": ' + _nested(256) + b"}"
    assert d.client.post("/v1/memories", content=deep, headers={"content-type": "application/json"}).status_code == 422
    inner = _nested(MAX_JSON_DEPTH - 1)  # with the body's own object: exactly at the bound
    ok = b'{"persona": "fake", "text": "just deep enough", "metadata": ' + inner + b"}"
    assert d.client.post("/v1/memories", content=ok, headers={"content-type": "application/json"}).status_code == 201
    listed = d.client.get("/v1/memories", params={"persona": "fake"})
    assert listed.status_code == 200
    assert "just deep enough" in listed.text
    found = d.client.post("/v1/memory/search", json={"query": "just deep enough", "persona": "fake"})
    assert found.status_code == 200, found.text


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/memory/search", {"query": "a", "persona": "fake", "limit": 5.5}, "limit"),
        ("/v1/memory/search", {"query": "a", "persona": "fake", "limit": "5"}, "limit"),
        ("/v1/memory/context", {"userId": "al", "query": "a", "tokenBudget": True}, "tokenBudget"),
        ("/v1/memories", {"persona": "fake", "text": "far ahead", "created_at": "9999-01-01T00:00:00Z"}, "created_at"),
        ("/v1/memories/import", {"persona": "fake", "memories": [{"text": "x", "created_at": "9999-12-31"}]}, None),
        ("/v1/memories", {"persona": "fake", "text": "\u200b\u200d\ufeff"}, "text"),
        ("/v1/channels/general/messages", {"user": "al", "text": "\u200b \u2060"}, "text"),
        ("/v1/chat", {"persona": "fake", "channel": "general", "user": "al", "message": "\u200b"}, "message"),
    ],
    ids=[
        "fraction-limit",
        "string-limit",
        "bool-budget",
        "year-9999",
        "import-year-9999",
        "zero-width",
        "zero-width-post",
        "zw-chat",
    ],
)
def test_the_small_ones_are_refused(daemons, path: str, body: dict, field: str | None) -> None:
    d = daemons()
    response = d.client.post(path, json=body)
    assert response.status_code == 422, response.text
    if field is not None:
        assert response.json()["error"]["field"] == field, response.text
    else:
        assert "created_at" in response.text
    with d.app.store.read() as conn:
        assert d.app.store.memories.count(conn) == 0
        assert d.app.store.messages.after(conn, "general", 0) == []


def test_http_1_0_without_a_host_gets_the_host_check(daemons) -> None:
    d = daemons()
    host, port = d.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GET /v1/personas HTTP/1.0\r\n\r\n")
        answer = sock.makefile("rb").read()
    assert answer.split(b" ", 2)[1] == b"421", answer[:200]
    assert b"host_not_allowed" in answer


def test_an_integer_written_with_a_zero_fraction_is_refused_like_any_coercion(daemons) -> None:
    """No coercion: where an integer is wanted, ``5.0`` is refused as ``5.5``, ``"5"`` and ``true``
    are (422 naming the field), in every body that takes one; ``5`` is taken."""
    d = daemons()
    assert d.client.post("/v1/memories", json={"persona": "fake", "text": "the boat is blue"}).status_code == 201
    for path, body, field in (
        ("/v1/memory/search", {"query": "boat", "persona": "fake", "limit": 1.0}, "limit"),
        ("/v1/memory/context", {"userId": "al", "query": "boat", "tokenBudget": 2000.0}, "tokenBudget"),
        ("/v1/memory/context", {"userId": "al", "query": "boat", "limit": 5.0}, "limit"),
    ):
        refused = d.client.post(path, json=body)
        assert refused.status_code == 422, (path, refused.text)
        assert refused.json()["error"]["field"] == field, refused.text
        assert "integer" in refused.json()["error"]["message"], refused.text
        whole = {k: int(v) if isinstance(v, float) else v for k, v in body.items()}
        assert d.client.post(path, json=whole).status_code == 200, (path, whole)
    found = d.client.post("/v1/memory/search", json={"query": "boat", "persona": "fake", "limit": 1})
    assert len(found.json()["results"]) == 1
