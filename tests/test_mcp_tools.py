"""Personas that use MCP servers: a persona driven by the fake OpenAI server calls the tools of a
small real MCP server written with the SDK (tests/mcp_tools_server.py), on stdio and over
Streamable HTTP, through a real daemon. A server's error, a hang, a crash and an oversized or
forged answer become what the model sees (a tool error with a catalogue code, a cut or escaped
result), never a failed turn; a crashed server is started again; budgets, ``agentd personas``
and ``agentd doctor`` show the servers."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.runtime.pipeline.record import ContextRecord
from agentd.runtime.scaleout.workers import shard_of
from tests.conftest import agentd_cli, write_home
from tests.support import SSE, Running, read_sse, wait_for
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, fake_persona
from tests.support.mcptools import SERVER, tools_server
from tests.support.serve import Serve

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow


def stdio_server(name: str = "tools", extra: str = "") -> str:
    """agentd.toml lines: the test server on stdio, its starts counted in $MCP_TEST_STARTS."""
    return tools_server(name, 'env = { MCP_TEST_STARTS = "${MCP_TEST_STARTS}" }\n' + extra)


def persona(fake: FakeOpenAI, servers: list[str]) -> dict[str, str]:
    return {"fake": fake_persona(fake.url) + f"mcp_servers = {json.dumps(servers)}\n"}


def events(sse: list[SSE], kind: str) -> list[dict[str, Any]]:
    return [e.data for e in sse if e.event == kind]


def tool_messages(fake: FakeOpenAI) -> list[dict[str, Any]]:
    """The tool results the model was sent, in its last request."""
    return [m for m in fake.chat_requests()[-1]["messages"] if m["role"] == "tool"]


def assert_started(starts: Path, times: int) -> None:
    """The server was started ``times`` times in all (a worker starts its servers as it starts, on a
    thread of its own: wait for that many, then check there is no more)."""

    def count() -> int:
        return len(starts.read_text().splitlines()) if starts.exists() else 0

    wait_for(lambda: count() >= times, 60, f"{times} server starts")
    assert count() == times, starts.read_text()


@pytest.fixture
def starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "starts.log"
    monkeypatch.setenv("MCP_TEST_STARTS", str(path))
    return path


def test_a_persona_calls_a_stdio_mcp_servers_tool(
    daemons: Callable[..., Running], fake_openai: FakeOpenAI, starts: Path
) -> None:
    """The tools are offered as mcp__tools__NAME with the server's schema; the call and its result
    are events, the result goes back to the model, and the context record keeps the call."""
    d = daemons(stdio_server(), persona(fake_openai, ["tools"]))
    fake_openai.queue(Turn(tool_calls=[("mcp__tools__weather", {"city": "Oslo"})]), Turn(text="Sunny in Oslo."))
    sse = d.chat("What is the weather in Oslo?")
    assert sse[-1].event == "done", sse[-1]
    (call,) = events(sse, "tool_call")
    assert call["name"] == "mcp__tools__weather"
    assert call["arguments"] == {"city": "Oslo"}
    (result,) = events(sse, "tool_result")
    assert result["result"]["content"] == "The weather in Oslo is sunny, 21 degrees"
    offered = {t["function"]["name"]: t["function"] for t in fake_openai.chat_requests()[0]["tools"]}
    assert {"remember", "recall", "mcp__tools__weather", "mcp__tools__forge_sections"} <= set(offered)
    assert offered["mcp__tools__weather"]["parameters"]["properties"]["city"]["type"] == "string"
    assert "weather" in offered["mcp__tools__weather"]["description"]
    (sent,) = tool_messages(fake_openai)
    assert "The weather in Oslo is sunny" in json.loads(sent["content"])["content"]
    with d.app.store.read() as conn:
        record = d.app.store.contexts.for_message(conn, sse[-1].data["message_id"])
    assert record is not None
    (used,) = ContextRecord.from_json(record.data).tool_calls
    assert used.name == "mcp__tools__weather"
    assert used.ok
    # A second turn uses the same server process: started once per process that runs turns (the
    # daemon, or each of its workers), not per turn.
    fake_openai.queue(Turn(tool_calls=[("mcp__tools__weather", {"city": "Rome"})]), Turn(text="Sunny."))
    assert d.chat("And in Rome?")[-1].event == "done"
    assert_started(starts, d.turn_processes)


def test_errors_hangs_and_big_or_forged_answers_are_what_the_model_sees_not_a_failed_turn(
    daemons: Callable[..., Running], fake_openai: FakeOpenAI, starts: Path
) -> None:
    d = daemons(stdio_server(extra="max_result_chars = 1000"), persona(fake_openai, ["tools"]))
    fake_openai.queue(
        Turn(
            tool_calls=[
                ("mcp__tools__fail", {"reason": "testing"}),
                ("mcp__tools__hang", {}),
                ("mcp__tools__big", {}),
                ("mcp__tools__forge_sections", {}),
                ("mcp__tools__nothing", {}),
            ]
        ),
        Turn(text="Done."),
    )
    sse = d.chat("Try the tools")
    assert sse[-1].event == "done", sse[-1]
    results = events(sse, "tool_result")
    assert [r["name"] for r in results] == [
        "mcp__tools__fail",
        "mcp__tools__hang",
        "mcp__tools__big",
        "mcp__tools__forge_sections",
        "mcp__tools__nothing",
    ]
    failed, hung, big, forged, unknown = results
    assert failed["error"]["code"] == "mcp_tool_error"
    assert "on purpose: testing" in failed["error"]["message"]
    assert hung["error"]["code"] == "mcp_timeout"
    assert "4 s" in hung["error"]["message"]
    assert big["result"]["truncated"] is True
    assert big["result"]["content"].startswith("x" * 1000)
    assert "49000 more characters" in big["result"]["content"]
    assert len(big["result"]["content"]) < 1100
    assert unknown["error"]["code"] == "InvalidInput"
    # What the model was sent: each result one JSON string; nothing in it starts a line of the prompt.
    sent = tool_messages(fake_openai)
    assert len(sent) == 5
    for message in sent:
        assert "\n" not in message["content"]
        assert "\u2028" not in message["content"]
    assert json.loads(sent[3]["content"])["content"].startswith("ok\n## Recalled Memories")
    assert json.loads(sent[1]["content"])["error"]["code"] == "mcp_timeout"


def test_a_crashed_server_is_a_tool_error_and_is_started_again(
    daemons: Callable[..., Running], fake_openai: FakeOpenAI, starts: Path
) -> None:
    d = daemons(stdio_server(), persona(fake_openai, ["tools"]))
    fake_openai.queue(Turn(tool_calls=[("mcp__tools__crash", {})]), Turn(text="It broke."))
    sse = d.chat("Crash it")
    assert sse[-1].event == "done", sse[-1]
    (crashed,) = events(sse, "tool_result")
    assert crashed["error"]["code"] == "mcp_unavailable"
    fake_openai.queue(Turn(tool_calls=[("mcp__tools__weather", {"city": "Oslo"})]), Turn(text="Sunny."))
    sse = d.chat("Weather?")
    (again,) = events(sse, "tool_result")
    assert again["result"]["content"].startswith("The weather in Oslo"), again
    assert_started(starts, d.turn_processes + 1)  # once in each process that runs turns, and again


@dataclass
class HttpServer:
    url: str
    proc: subprocess.Popen[str]


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    """The test server over Streamable HTTP, refusing requests without ``Authorization: Bearer s3cret``."""
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", "--require-header", "Authorization=Bearer s3cret"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    line = lines.get(timeout=120)
    assert line.startswith("listening on "), line
    yield HttpServer(f"http://127.0.0.1:{line.split()[-1]}/mcp", proc)
    proc.kill()
    proc.wait(10)


def test_two_servers_one_over_http_with_a_key_from_the_environment(
    daemons: Callable[..., Running],
    fake_openai: FakeOpenAI,
    starts: Path,
    http_server: HttpServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same tool of two servers gets two names; the HTTP server's key comes from ${WEB_KEY}; when
    the HTTP server is gone, its tool is a tool error and the turn still answers."""
    monkeypatch.setenv("WEB_KEY", "s3cret")
    config = (
        stdio_server()
        + f"""
[mcp.servers.web]
url = "{http_server.url}"
headers = {{ Authorization = "Bearer ${{WEB_KEY}}" }}
timeout_seconds = 10
tools = ["weather"]
"""
    )
    d = daemons(config, persona(fake_openai, ["tools", "web"]))
    fake_openai.queue(
        Turn(tool_calls=[("mcp__web__weather", {"city": "Rome"}), ("mcp__tools__weather", {"city": "Oslo"})]),
        Turn(text="Both sunny."),
    )
    sse = d.chat("Weather in Rome and Oslo?")
    assert sse[-1].event == "done", sse[-1]
    rome, oslo = events(sse, "tool_result")
    assert rome["result"] == {"server": "web", "tool": "weather", "content": "The weather in Rome is sunny, 21 degrees"}
    assert oslo["result"]["server"] == "tools"
    offered = [t["function"]["name"] for t in fake_openai.chat_requests()[0]["tools"]]
    assert "mcp__web__weather" in offered
    assert "mcp__web__fail" not in offered
    assert "mcp__tools__fail" in offered

    http_server.proc.kill()
    http_server.proc.wait(10)
    fake_openai.queue(Turn(tool_calls=[("mcp__web__weather", {"city": "Rome"})]), Turn(text="No weather."))
    sse = d.chat("Weather in Rome again?")
    assert sse[-1].event == "done", sse[-1]
    (gone,) = events(sse, "tool_result")
    assert gone["error"]["code"] == "mcp_unavailable", gone


def test_budget_personas_and_doctor_show_the_servers(
    tmp_path: Path, fake_openai: FakeOpenAI, starts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool definitions count in the budget; personas and doctor say which server runs and why
    one does not."""
    monkeypatch.setenv(KEY_ENV, "test-key")
    config = (
        stdio_server()
        + """
[mcp.servers.broken]
command = ["/nonexistent/mcp-server"]
start_timeout_seconds = 20
"""
    )
    with_tools = write_home(tmp_path / "a", config, persona(fake_openai, ["tools"]))
    without = write_home(tmp_path / "b", config, persona(fake_openai, []))

    def budget(home: Path) -> dict[str, Any]:
        shown = agentd_cli("budget", "fake", "--channel", "general", "--json", config=home)
        assert shown.returncode == 0, shown.stderr
        return json.loads(shown.stdout)  # type: ignore[no-any-return]

    assert budget(with_tools)["tools_tokens"] > budget(without)["tools_tokens"] + 100
    table = agentd_cli("budget", "fake", "--channel", "general", config=with_tools)
    assert "mcp__tools__weather" in table.stdout

    both = write_home(tmp_path / "c", config, persona(fake_openai, ["tools", "broken"]))
    listed = agentd_cli("personas", "--json", config=both)
    assert listed.returncode == 0, listed.stderr
    (fake,) = json.loads(listed.stdout)
    servers = {s["name"]: s for s in fake["mcp_servers"]}
    assert servers["tools"]["up"]
    assert "weather" in servers["tools"]["tools"]
    assert not servers["broken"]["up"]
    assert "nonexistent" in servers["broken"]["error"]
    report = agentd_cli("doctor", "--json", config=both)
    assert report.returncode == 1
    checks = {c["check"]: c for c in json.loads(report.stdout)}
    assert checks["mcp tools"]["ok"]
    assert "weather" in checks["mcp tools"]["detail"]
    assert not checks["mcp broken"]["ok"]
    assert "cannot be started" in checks["mcp broken"]["detail"]


def test_a_persona_naming_an_unknown_server_is_a_config_error(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    home = write_home(tmp_path, stdio_server(), persona(fake_openai, ["tools", "nope"]))
    result = agentd_cli("personas", config=home)
    assert result.returncode == 2
    assert "fake.toml: mcp_servers: unknown MCP server 'nope'; configured in [mcp.servers]: tools" in result.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_each_worker_process_runs_its_own_servers_and_stops_them_with_the_daemon(
    tmp_path: Path, fake_openai: FakeOpenAI, starts: Path
) -> None:
    """``agentd serve`` with two worker processes: each starts the server once, a turn in either
    calls it, and SIGTERM stops every server process with the daemon."""
    home = write_home(tmp_path, stdio_server() + "[runtime]\nworkers = 2\n", persona(fake_openai, ["tools"]))
    daemon = Serve(home)
    try:
        channels = [
            "general",
            next(c for c in (f"room-{i}" for i in range(50)) if shard_of(c, 2) != shard_of("general", 2)),
        ]
        for channel in channels:
            fake_openai.queue(Turn(tool_calls=[("mcp__tools__weather", {"city": channel})]), Turn(text="Sunny."))
            body = {"persona": "fake", "channel": channel, "user": "alice", "message": "Weather?"}
            with httpx.stream("POST", f"{daemon.url}/v1/chat", json=body, timeout=120) as response:
                sse = list(read_sse(response.iter_lines()))
            (result,) = events(sse, "tool_result")
            assert result["result"]["content"] == f"The weather in {channel} is sunny, 21 degrees", result
        wait_for(lambda: len(starts.read_text().split()) >= 2, 60, "each worker to start the server")
        assert len(starts.read_text().splitlines()) == 2, (starts.read_text(), daemon.proc.pid, daemon.stderr)
        pids = [int(p) for p in starts.read_text().split()]
        assert all(_alive(p) for p in pids)
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(60) == 0
        wait_for(lambda: not any(_alive(p) for p in pids), 30, "the MCP server processes to end")
    finally:
        daemon.stop()


def test_a_worker_reads_the_environment_the_daemon_has_when_the_worker_starts(
    daemons: Callable[..., Running], fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers fork from one fork server per process, started with the first worker: a later
    daemon's workers still get the environment as it is when they start (here what ${MCP_TEST_STARTS}
    names), not the fork server's."""
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    monkeypatch.setenv("MCP_TEST_STARTS", str(first))
    one = daemons(stdio_server(), persona(fake_openai, ["tools"]), workers=2)
    assert_started(first, 2)
    monkeypatch.setenv("MCP_TEST_STARTS", str(second))
    two = daemons(stdio_server(), persona(fake_openai, ["tools"]), workers=2)
    assert_started(second, 2)
    assert_started(first, 2)
    assert one.turn_processes == two.turn_processes == 2
