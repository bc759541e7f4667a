"""A fake OpenAI-compatible server on loopback, for driving litellm in tests.

It records every request it receives, answers ``/v1/chat/completions``
(streaming or not) from a script of turns, and ``/v1/embeddings`` with
deterministic bag-of-words vectors. Faults can be injected per request: a turn
can answer an HTTP error (with ``Retry-After``), a body that is not JSON, hang,
or close the connection mid-stream; an embeddings answer can be NaN, of the
wrong dimension, zero, empty, an HTTP error, a hang or a closed connection.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

#: The environment variable that holds the fake server's (ignored) API key in test configs.
KEY_ENV = "FAKE_OPENAI_KEY"


def embedding_config(fake: FakeOpenAI, extra: str = "") -> str:
    """agentd.toml lines: embeddings from ``fake`` through litellm (so delays and errors can be injected)."""
    return f"""
[embedding]
provider = "litellm"
model = "openai/fake-embed"
api_base = "{fake.url}"
api_key_env = "{KEY_ENV}"
{extra}
"""


def fake_persona(url: str, name: str = "fake", skills: str = '["remember", "recall"]', channels: str = "[]") -> str:
    """A persona file whose model is the fake OpenAI server at ``url``."""
    return f"""
name = "{name}"
model = "openai/fake-model"
api_base = "{url}"
api_key_env = "{KEY_ENV}"
max_reply_tokens = 256
skills = {skills}
channels = {channels}
system_prompt = "You are {name}, a test persona."
"""


@dataclass
class Turn:
    """One scripted assistant turn: text and/or tool calls ``[(name, arguments_dict)]``.

    Faults: ``status`` (an HTTP error, with ``headers`` such as ``Retry-After``),
    ``body`` (a 200 answer whose body is these bytes, not JSON), ``hang`` (no
    answer until the server stops or :meth:`FakeOpenAI.release` is called),
    ``close_after`` (stream that many words, then close the connection with no
    ``finish_reason`` and no ``[DONE]``), ``reset`` (close the connection before
    any answer). ``pause_after``: stream that many words, then wait for
    :meth:`FakeOpenAI.release` before the rest (a test sees the reply mid-stream,
    however late the machine delivers each part).
    """

    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    hang: bool = False
    close_after: int | None = None
    reset: bool = False
    pause_after: int | None = None


@dataclass(frozen=True)
class EmbeddingFault:
    """What one ``/v1/embeddings`` answer does wrong.

    ``kind``: ``nan`` (a NaN in each vector), ``inf``, ``zero`` (all-zero vectors),
    ``dimension`` (vectors of ``dimension`` values instead), ``empty`` (no data),
    ``status`` (HTTP ``status``), ``garbage`` (200, not JSON), ``hang``,
    ``reset`` (the connection closes before an answer).
    """

    kind: str
    status: int = 500
    dimension: int = 3


def bow_vector(text: str, dim: int) -> list[float]:
    """A deterministic unit vector: hashed word counts (similar words, similar vectors)."""
    vec = np.zeros(dim, dtype=np.float64)
    for word in re.findall(r"\w+", text.lower()):
        h = int(hashlib.md5(word.encode()).hexdigest(), 16)
        vec[h % dim] += 1.0
    norm = np.linalg.norm(vec)
    if norm == 0:
        vec[0] = 1.0
        norm = 1.0
    return (vec / norm).tolist()


class FakeOpenAI:
    """Start with :meth:`start`; ``url`` is the ``api_base`` to give litellm."""

    def __init__(self, embedding_dim: int = 64) -> None:
        self.embedding_dim = embedding_dim
        self.requests: list[tuple[str, dict[str, Any]]] = []
        #: The Authorization header of each request, in order (None when absent).
        self.authorizations: list[str | None] = []
        self.script: deque[Turn] = deque()
        self.embedding_faults: deque[EmbeddingFault] = deque()
        #: When set, every embeddings request gets this fault (until set back to None).
        self.embedding_fault: EmbeddingFault | None = None
        self.embedding_delay = 0.0
        self.chat_delay_per_token = 0.0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        #: Set while a streamed reply is being written (lets tests act mid-stream).
        self.streaming = threading.Event()
        #: Hanging requests wait for this (set by :meth:`release` and :meth:`stop`).
        self._released = threading.Event()
        self._hanging = 0

    # -- control -------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.requests.append((self.path, body))
                    fake.authorizations.append(self.headers.get("Authorization"))
                try:
                    if self.path.endswith("/embeddings"):
                        fake._embeddings(self, body)
                    elif self.path.endswith("/chat/completions"):
                        fake._chat(self, body)
                    else:
                        self.send_error(404)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (e.g. its timeout after a hang)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # stop() waits for serve_forever to notice the request, which it checks once per poll
        # interval: 0.5 s by default, paid by every test's teardown.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def queue(self, *turns: Turn) -> None:
        """Script the next assistant turns (when empty, the server echoes the last user message)."""
        with self._lock:
            self.script.extend(turns)

    def queue_embeddings(self, *faults: EmbeddingFault) -> None:
        """The next embeddings requests answer with these faults, one each, in order."""
        with self._lock:
            self.embedding_faults.extend(faults)

    def release(self) -> None:
        """End every hang (those hanging now answer as if they had not hung)."""
        self._released.set()

    def hold(self) -> None:
        """Hang again from now on (after :meth:`release`): later hangs and pauses wait for the next release."""
        self._released.clear()

    @property
    def hanging(self) -> int:
        """How many requests are hanging right now."""
        with self._lock:
            return self._hanging

    def _hang(self) -> None:
        with self._lock:
            self._hanging += 1
        try:
            self._released.wait(120)
        finally:
            with self._lock:
                self._hanging -= 1

    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of every chat completion request, in order."""
        with self._lock:
            return [b for p, b in self.requests if p.endswith("/chat/completions")]

    def embedding_requests(self) -> list[dict[str, Any]]:
        """Bodies of every embeddings request, in order."""
        with self._lock:
            return [b for p, b in self.requests if p.endswith("/embeddings")]

    # -- handlers ------------------------------------------------------------------

    def _send_json(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        # NaN and Infinity go out as JSON's non-standard literals, as a broken server would send them.
        self._send_raw(handler, status, json.dumps(payload).encode(), "application/json", headers)

    def _send_raw(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        data: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        # One request per connection, so stop() really takes the server away.
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)
        handler.close_connection = True

    @staticmethod
    def _reset(handler: BaseHTTPRequestHandler) -> None:
        """Close the connection with no answer at all."""
        handler.close_connection = True
        handler.wfile.flush()
        handler.connection.shutdown(2)  # socket.SHUT_RDWR

    def _embeddings(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if self.embedding_delay:
            time.sleep(self.embedding_delay)
        with self._lock:
            fault = self.embedding_faults.popleft() if self.embedding_faults else self.embedding_fault
        inputs = body.get("input", [])
        if isinstance(inputs, str):
            inputs = [inputs]
        kind = fault.kind if fault is not None else ""
        if kind == "hang":
            self._hang()
        elif kind == "reset":
            self._reset(handler)
            return
        elif kind == "status":
            assert fault is not None
            self._send_json(handler, fault.status, {"error": {"message": "scripted failure", "type": "server_error"}})
            return
        elif kind == "garbage":
            self._send_raw(handler, 200, b"<html>not json</html>", "application/json")
            return
        dim = fault.dimension if kind == "dimension" and fault is not None else self.embedding_dim
        vectors = [bow_vector(text, dim) for text in inputs]
        for vec in vectors:
            if kind == "nan":
                vec[0] = float("nan")
            elif kind == "inf":
                vec[0] = float("inf")
            elif kind == "zero":
                vec[:] = [0.0] * len(vec)
        data = [
            {"object": "embedding", "index": i, "embedding": vec} for i, vec in enumerate(vectors) if kind != "empty"
        ]
        self._send_json(
            handler,
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model"),
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )

    def _next_turn(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            if self.script:
                return self.script.popleft()
        last_user = next((m for m in reversed(body.get("messages", [])) if m.get("role") == "user"), None)
        content = last_user.get("content") if last_user else ""
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content)
        return Turn(text=f"echo: {content}")

    def _chat(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        turn = self._next_turn(body)
        if turn.delay:
            time.sleep(turn.delay)
        if turn.hang:
            self._hang()
        if turn.reset:
            self._reset(handler)
            return
        if turn.status != 200:
            self._send_json(
                handler,
                turn.status,
                {"error": {"message": "scripted failure", "type": "server_error"}},
                turn.headers,
            )
            return
        if turn.body is not None:
            content_type = "text/event-stream" if body.get("stream") else "application/json"
            self._send_raw(handler, 200, turn.body, content_type)
            return
        calls = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(turn.tool_calls)
        ]
        finish = "tool_calls" if calls else "stop"
        usage = {"prompt_tokens": 11, "completion_tokens": max(1, len(turn.text.split())), "total_tokens": 0}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            if calls:
                message["tool_calls"] = calls
            self._send_json(
                handler,
                200,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model"),
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                },
            )
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()

        def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> None:
            payload = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": body.get("model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                **extra,
            }
            handler.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            handler.wfile.flush()

        self.streaming.set()
        try:
            chunk({"role": "assistant", "content": ""})
            for n, word in enumerate(re.findall(r"\S+\s*", turn.text)):
                if turn.close_after is not None and n >= turn.close_after:
                    break
                if turn.pause_after is not None and n == turn.pause_after:
                    self._hang()
                if self.chat_delay_per_token:
                    time.sleep(self.chat_delay_per_token)
                chunk({"content": word})
            if turn.close_after is not None:  # the connection drops: no finish_reason, no [DONE]
                handler.close_connection = True
                return
            for i, call in enumerate(calls):
                chunk({"tool_calls": [{"index": i, **call}]})
            chunk({}, finish)
            if (body.get("stream_options") or {}).get("include_usage"):
                payload = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": body.get("model"),
                    "choices": [],
                    "usage": usage,
                }
                handler.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            handler.wfile.write(b"data: [DONE]\n\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self.streaming.clear()
        handler.close_connection = True
