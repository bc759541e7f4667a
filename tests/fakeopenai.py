"""A fake OpenAI-compatible server on loopback, for driving litellm in tests.

It records every request it receives, answers ``/v1/chat/completions``
(streaming or not) from a script of turns, and ``/v1/embeddings`` with
deterministic bag-of-words vectors. Delays and errors can be injected.
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
max_tokens = 256
skills = {skills}
channels = {channels}
system_prompt = "You are {name}, a test persona."
"""


@dataclass
class Turn:
    """One scripted assistant turn: text and/or tool calls ``[(name, arguments_dict)]``."""

    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    delay: float = 0.0


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
        self.script: deque[Turn] = deque()
        self.embedding_delay = 0.0
        self.chat_delay_per_token = 0.0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        #: Set while a streamed reply is being written (lets tests act mid-stream).
        self.streaming = threading.Event()

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
                if self.path.endswith("/embeddings"):
                    fake._embeddings(self, body)
                elif self.path.endswith("/chat/completions"):
                    fake._chat(self, body)
                else:
                    self.send_error(404)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
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

    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of every chat completion request, in order."""
        with self._lock:
            return [b for p, b in self.requests if p.endswith("/chat/completions")]

    def embedding_requests(self) -> list[dict[str, Any]]:
        """Bodies of every embeddings request, in order."""
        with self._lock:
            return [b for p, b in self.requests if p.endswith("/embeddings")]

    # -- handlers ------------------------------------------------------------------

    def _send_json(self, handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        # One request per connection, so stop() really takes the server away.
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)
        handler.close_connection = True

    def _embeddings(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if self.embedding_delay:
            time.sleep(self.embedding_delay)
        inputs = body.get("input", [])
        if isinstance(inputs, str):
            inputs = [inputs]
        data = [
            {"object": "embedding", "index": i, "embedding": bow_vector(text, self.embedding_dim)}
            for i, text in enumerate(inputs)
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
        if turn.status != 200:
            self._send_json(handler, turn.status, {"error": {"message": "scripted failure", "type": "server_error"}})
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
            for word in re.findall(r"\S+\s*", turn.text):
                if self.chat_delay_per_token:
                    time.sleep(self.chat_delay_per_token)
                chunk({"content": word})
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
