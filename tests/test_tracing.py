"""OpenTelemetry traces ([telemetry] otlp_endpoint): ``agentd serve`` in a subprocess exports its
spans over OTLP/HTTP to a collector the test runs on loopback (decoding each
``ExportTraceServiceRequest`` with opentelemetry-proto). A turn is one trace: the HTTP request
(with the caller's ``traceparent`` honoured), the worker hop when turns run in worker processes,
retrieval (search, embeddings), assembly, each model call (GenAI conventions, token usage),
each tool call, the store. Off, nothing of OpenTelemetry is imported; a bad endpoint, or one
set without the extra installed, fails at start naming the key."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd._exceptions import ConfigError
from agentd.config import load_config
from tests.conftest import write_home
from tests.support import wait_for
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, fake_persona
from tests.support.processes import run as run_cli
from tests.support.serve import Serve

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Received:
    """One span as the collector received it."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    service: str
    ok: bool


class Collector:
    """An OTLP/HTTP trace receiver on loopback: ``POST /v1/traces`` with a protobuf body."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceRequest,
                    ExportTraceServiceResponse,
                )

                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.add(self.path, self.headers.get("Content-Type", ""), request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, path: str, content_type: str, request: Any) -> None:
        assert path == "/v1/traces", path
        assert content_type == "application/x-protobuf", content_type
        found: list[Received] = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    found.append(
                        Received(
                            s.name,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            {a.key: _value(a.value) for a in s.attributes},
                            str(resource.get("service.name")),
                            s.status.code != 2,  # STATUS_CODE_ERROR
                        )
                    )
        with self._lock:
            self.spans.extend(found)

    def trace(self, trace_id: str) -> list[Received]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in any_value.array_value.values)
    return getattr(any_value, kind) if kind else None


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.stop()


@pytest.fixture
def traced_daemon(
    tmp_path: Path, collector: Collector, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """``agentd serve`` exporting to ``collector``; ``start(workers)``. Batches go out every 100 ms."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    started: list[Serve] = []

    def start(workers: int) -> Serve:
        config = (
            f'[telemetry]\notlp_endpoint = "{collector.url}"\nservice_name = "agentd-test"\n'
            f"[runtime]\nworkers = {workers}\n"
        )
        personas = {"fake": fake_persona(fake_openai.url, channels='["support-*"]')}
        s = Serve(write_home(tmp_path / f"home{len(started)}", config, personas))
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def _children(spans: list[Received], parent: Received) -> dict[str, Received]:
    return {s.name: s for s in spans if s.parent_id == parent.span_id}


def _one(spans: list[Received], name: str) -> Received:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "worker-processes"])
def test_a_turn_is_one_trace_from_the_request_to_the_store(
    traced_daemon: Any, collector: Collector, fake_openai: FakeOpenAI, workers: int
) -> None:
    """The caller's traceparent is honoured: the trace id it sent is the trace of the request and
    of the turn's every span, linked parent to child, in this process or across a worker's pipe."""
    daemon = traced_daemon(workers)
    fake_openai.queue(
        Turn(tool_calls=[("remember", {"text": "The user's favourite colour is teal", "category": "preference"})]),
        Turn(text="Noted: teal."),
    )
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    headers = {"X-API-Key": "test-key", "traceparent": f"00-{trace_id}-{caller_span}-01"}
    with httpx.Client(base_url=daemon.url, headers=headers, timeout=60) as client:
        # A memory to search for (its own trace: no traceparent), so that retrieval embeds the query.
        memory = {"persona": "fake", "text": "The user's favourite food is ramen", "userId": "ann"}
        assert client.post("/v1/memories", json=memory, headers={"traceparent": ""}).status_code == 201
        posted = client.post(
            "/v1/channels/support-1/messages",
            json={"persona": "fake", "user": "ann", "text": "Please remember my favourite colour is teal"},
        )
        assert posted.status_code == 202, posted.text
    names = {"POST /v1/channels/{channel}/messages", "turn", "store reply", "chat openai/fake-model"}
    try:
        spans = wait_for(
            lambda: (
                (found := collector.trace(trace_id))
                and names <= {s.name for s in found}
                and sum(s.name == "chat openai/fake-model" for s in found) == 2
                and found
            ),
            60,
            "the turn's spans",
        )
    except AssertionError:
        raise AssertionError(f"received: {[(s.name, s.trace_id) for s in collector.spans]}\n{daemon.stderr}") from None
    request = _one(spans, "POST /v1/channels/{channel}/messages")
    assert request.parent_id == caller_span
    assert request.attributes["http.route"] == "/v1/channels/{channel}/messages"
    assert request.attributes["http.response.status_code"] == 202
    turn = _one(spans, "turn")
    if workers:
        hop = _one(spans, "route to worker")
        assert hop.parent_id == request.span_id
        assert turn.parent_id == hop.span_id
    else:
        assert turn.parent_id == request.span_id
    assert turn.attributes["agentd.persona"] == "fake"
    assert turn.ok
    assert {s.service for s in spans} == {"agentd-test"}
    under_turn = _children(spans, turn)
    assert {"retrieval", "assemble", "chat openai/fake-model", "execute_tool remember", "store reply"} <= set(
        under_turn
    ), sorted(under_turn)
    search = _children(spans, under_turn["retrieval"])["search"]
    assert any(s.name.startswith("embeddings ") for s in _children(spans, search).values()), spans
    tool = under_turn["execute_tool remember"]
    assert tool.attributes["gen_ai.tool.name"] == "remember"
    assert any(s.name.startswith("embeddings ") for s in _children(spans, tool).values())
    chats = [s for s in spans if s.name == "chat openai/fake-model"]
    assert all(c.parent_id == turn.span_id for c in chats)
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "openai/fake-model"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 11
        assert chat.attributes["gen_ai.usage.output_tokens"] >= 1
    # The reply's store is the turn's last stage.
    assert under_turn["store reply"].ok


def test_a_subagent_turn_is_a_child_of_the_tool_call_that_asked_for_it(
    tmp_path: Path, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """buddy (the offline model) delegates to scholar: scholar's turn, with its own model call, is
    in the same trace, under buddy's ``execute_tool delegate``."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    daemon = Serve(write_home(tmp_path, f'[telemetry]\notlp_endpoint = "{collector.url}"\n'))
    try:
        trace_id = secrets.token_hex(16)
        headers = {"X-API-Key": "test-key", "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
        body = {"persona": "buddy", "channel": "general", "user": "ann", "message": "ask scholar to explain tides"}
        answer = httpx.post(daemon.url + "/v1/chat", json=body, headers=headers, timeout=60)
        assert answer.status_code == 200
        assert "event: done" in answer.text

        def both_turns() -> list[Received]:
            found = collector.trace(trace_id)
            done = sum(s.name == "turn" for s in found) == 2 and any(s.name == "POST /v1/chat" for s in found)
            return found if done else []

        spans = wait_for(both_turns, 60, "both turns' spans")
    finally:
        daemon.stop()
    request = _one(spans, "POST /v1/chat")
    (outer,) = [s for s in spans if s.name == "turn" and s.attributes["agentd.persona"] == "buddy"]
    (inner,) = [s for s in spans if s.name == "turn" and s.attributes["agentd.persona"] == "scholar"]
    hop = [s for s in spans if s.name == "route to worker"]  # [runtime] workers = "auto"
    assert outer.parent_id == (hop[0].span_id if hop else request.span_id)
    assert all(h.parent_id == request.span_id for h in hop)
    tool = _children(spans, outer)["execute_tool delegate"]
    assert inner.parent_id == tool.span_id
    assert _children(spans, inner)["chat offline"].attributes["gen_ai.provider.name"] == "agentd"


def test_a_request_without_traceparent_begins_a_trace_of_its_own(traced_daemon: Any, collector: Collector) -> None:
    """No header (or one that is not valid W3C): the request's span is the root of a new trace."""
    daemon = traced_daemon(0)
    with httpx.Client(base_url=daemon.url, headers={"X-API-Key": "test-key"}, timeout=60) as client:
        assert client.get("/v1/personas").status_code == 200
        bad = client.get("/v1/personas", headers={"traceparent": "00-not-a-trace-01"})
        assert bad.status_code == 200
    roots = wait_for(
        lambda: len(found := [s for s in collector.spans if s.name == "GET /v1/personas"]) == 2 and found,
        30,
        "both requests' spans",
    )
    assert all(s.parent_id == "" for s in roots)
    assert roots[0].trace_id != roots[1].trace_id


def test_without_an_endpoint_the_sdk_is_not_imported(tmp_path: Path) -> None:
    """``agentd --help`` imports none of it; a daemon answering a turn in worker processes none of
    the SDK (the API package comes with FastAPI and mcp)."""
    status, out, _err, imported = run_cli(["--help"], tmp_path, importtime=True)
    assert status == 0
    assert "serve" in out
    assert "opentelemetry" not in imported
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    os.environ.update(env)
    try:
        daemon = Serve(write_home(tmp_path / "home", "[runtime]\nworkers = 1\n"))
    finally:
        for key in env:
            del os.environ[key]
    try:
        with httpx.Client(base_url=daemon.url, headers={"X-API-Key": "test-key"}, timeout=60) as client:
            answer = client.post(
                "/v1/chat", json={"persona": "buddy", "channel": "general", "user": "ann", "message": "hi"}
            )
            assert answer.status_code == 200
            assert "event: done" in answer.text
    finally:
        daemon.stop()
    imported = {line.rsplit("|", 1)[-1].strip() for line in daemon.stderr if line.startswith("import time:")}
    assert "agentd.runtime.scaleout.worker" in imported  # the workers' imports are seen too
    assert "agentd.observe.tracing" in imported  # the hooks are there, off
    # FastAPI (fastapi.telemetry) and mcp import OpenTelemetry's API package, a dependency of mcp,
    # whatever agentd does; the SDK, the exporter and protobuf are agentd's, and stay out.
    heavy = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto", "google.protobuf")
    assert not sorted(m for m in imported if m.startswith(heavy))


def test_off_every_hook_is_the_shared_no_op() -> None:
    """Without an endpoint the hooks make nothing: one shared no-op span, no traceparent, the
    function itself (what bench/tracing_cost.py times)."""
    from agentd.config import TelemetryConfig
    from agentd.observe import tracing

    assert tracing.configure(TelemetryConfig()) is False
    assert not tracing.enabled()
    assert tracing.span("turn", {"agentd.persona": "p"}, parent="") is tracing.NO_SPAN
    assert tracing.inject() == ""

    def work(x: int) -> int:
        return x + 1

    assert tracing.traced(work, "search") is work
    assert tracing.spanned("assemble")(work)(1) == 2


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("localhost:4318", "http:// or https://"),
        ("ftp://collector:4318", "http:// or https://"),
        ("http://", "with a host"),
        ("http://collector:99999", "not a URL"),
        ("http://collector:4318/?x=1", "without query"),
    ],
)
def test_a_bad_endpoint_is_refused_at_start_naming_the_key(tmp_path: Path, endpoint: str, reason: str) -> None:
    home = write_home(tmp_path, f'[telemetry]\notlp_endpoint = "{endpoint}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(home, environ={})
    assert caught.value.key == "telemetry.otlp_endpoint"
    assert reason in caught.value.reason
    with pytest.raises(ConfigError) as again:
        load_config(write_home(tmp_path / "env"), environ={"AGENTD_TELEMETRY__SERVICE_NAME": ""})
    assert again.value.key == "telemetry.service_name"


def test_an_endpoint_without_the_extra_installed_fails_at_start_naming_the_key_and_the_extra(tmp_path: Path) -> None:
    """The SDK and the exporter made unimportable (as when the extra is not installed; the API
    package comes with FastAPI): ``agentd serve`` exits at
    start with one line naming ``[telemetry] otlp_endpoint`` and the extra to install."""
    home = write_home(tmp_path, '[telemetry]\notlp_endpoint = "http://127.0.0.1:4318"\n')
    code = (
        "import sys; sys.modules['opentelemetry.sdk'] = sys.modules['opentelemetry.exporter'] = None; "
        "from agentd.cli.main import main; sys.argv[0] = 'agentd'; main()"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env[KEY_ENV] = "test-key"
    done = subprocess.run(
        [sys.executable, "-c", code, "--config", str(home), "serve", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode != 0
    assert "telemetry.otlp_endpoint" in done.stderr, done.stderr
    assert "agentd[telemetry]" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
