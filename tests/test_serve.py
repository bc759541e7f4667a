"""``agentd serve`` and ``agentd post`` as installed commands, in subprocesses:
binding rules, SIGTERM during a streamed reply, restart answers what was pending,
and the CLI and example adapter talking to a running daemon."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.app import App
from agentd.config import load_config
from tests.conftest import REPO, agentd_cli, agentd_process, write_home
from tests.support import read_sse, wait_for
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, fake_persona
from tests.support.serve import Serve

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow

LONG_REPLY = " ".join(f"word{i}" for i in range(80))


def test_serve_refuses_to_bind_beyond_loopback_without_a_key(tmp_path) -> None:
    home = write_home(tmp_path)
    result = agentd_process("serve", "--host", "0.0.0.0", "--port", "0", config=home, timeout=60)
    assert result.returncode == 2
    assert "refusing to listen on '0.0.0.0'" in result.stderr
    assert "api_key" in result.stderr
    assert "listening" not in result.stdout


@pytest.fixture
def serve(tmp_path: Path, fake_openai: FakeOpenAI) -> Iterator[Any]:
    running: list[Serve] = []

    def start(home: Path) -> Serve:
        s = Serve(home)
        running.append(s)
        return s

    yield start
    for s in running:
        s.stop()


def test_sigterm_while_the_daemon_writes_a_log_line_still_stops_it(tmp_path) -> None:
    """The signal handler runs on the main thread, which may be in the middle of writing a log line
    (holding the log's lock) when the signal arrives. Made likely here: nobody reads the daemon's
    stderr while requests keep coming, so once its pipe is full the main thread is blocked in the
    middle of writing an access line; the signal is sent when nothing more has been written."""
    home = write_home(tmp_path)
    home.write_text(home.read_text().replace('level = "warning"', 'level = "info"'))
    exe = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    proc = subprocess.Popen(
        [exe, "--config", str(home), "serve", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        url = proc.stdout.readline().decode().split("listening on ")[1].split()[0]
        # Within a page of the pipe's capacity: a short write that does not fit waits for a reader.
        nearly_full = fcntl.fcntl(proc.stderr, fcntl.F_GETPIPE_SZ) - 4096
        seen = [0]

        def full() -> bool:
            held = struct.unpack("i", fcntl.ioctl(proc.stderr, termios.FIONREAD, b"\0\0\0\0"))[0]
            stuck, seen[0] = held == seen[0] and held > nearly_full, held
            return stuck

        def requests() -> None:  # one access line each, until the daemon stops answering
            with httpx.Client(base_url=url, timeout=120) as client, contextlib.suppress(httpx.HTTPError):
                while True:
                    client.get("/healthz")

        threading.Thread(target=requests, daemon=True).start()
        wait_for(full, 60, "the daemon's stderr pipe to fill")
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)  # reading stderr lets the write, then the shutdown, go on
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err[-3000:]
    assert b'"event": "shutdown_requested"' in err
    assert b'"signal": "SIGTERM"' in err


def test_sigterm_sent_as_soon_as_the_daemon_says_it_listens_stops_it_gracefully(tmp_path) -> None:
    """``agentd serve`` prints its address before its event loop starts; the signal handlers are
    in place from that line on. Here, in the test's own process (its main thread, as serve's): a
    SIGTERM arriving before ``run()`` makes it start, drain and stop; with the default handler
    the process would be killed (exit status -15, seen in a test that signalled right away)."""
    from agentd.api.server import DaemonServer

    app = App(load_config(write_home(tmp_path), environ={}))
    server = DaemonServer(app, "127.0.0.1", 0)
    previous = signal.getsignal(signal.SIGTERM)
    server.handle_signals()
    os.kill(os.getpid(), signal.SIGTERM)
    server.run()  # returns: the shutdown began at once
    assert signal.getsignal(signal.SIGTERM) is previous  # the handlers are put back
    assert not server.runtime.accepting  # drained and stopped
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/healthz", timeout=5)


@pytest.mark.parametrize(("grace", "outcome"), [(0.3, "interrupted"), (20.0, "complete")])
def test_sigterm_during_a_streamed_reply_stores_the_message_and_the_reply(
    tmp_path, fake_openai, serve, grace, outcome
) -> None:
    config = f'[embedding]\nprovider = "none"\n[daemon]\nshutdown_grace_seconds = {grace}\n'
    home = write_home(tmp_path, config, {"fake": fake_persona(fake_openai.url)})
    fake_openai.chat_delay_per_token = 0.03  # 80 words: about 2.4 s of streaming
    fake_openai.queue(Turn(text=LONG_REPLY))
    daemon = serve(home)
    events: list[Any] = []
    with httpx.Client(base_url=daemon.url, timeout=60) as client:
        body = {"persona": "fake", "channel": "general", "user": "alice", "message": "tell me a long story"}
        with client.stream("POST", "/v1/chat", json=body) as response:
            assert response.status_code == 200
            queued = client.post(
                "/v1/channels/general/messages", json={"persona": "fake", "user": "bob", "text": "and then?"}
            )
            assert queued.status_code == 202  # accepted behind the streaming turn
            for ev in read_sse(response.iter_lines()):
                events.append(ev)
                if ev.event == "token_delta" and len(events) == 3:
                    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(60) == 0, daemon.stderr
    last = events[-1]
    user_id = int(response.headers["X-Agentd-Message-Id"])
    app = App(load_config(home, environ={}))
    try:
        with app.store.read() as conn:
            user_msg = app.store.messages.get(conn, user_id)
            replies = app.store.messages.replies_to(conn, [user_id])
            waiting = app.store.messages.get(conn, queued.json()["id"])
    finally:
        app.close()
    assert user_msg is not None
    assert user_msg.content == "tell me a long story"
    reply = replies[user_id]
    streamed = "".join(e.data["text"] for e in events if e.event == "token_delta")
    if outcome == "complete":
        assert last.event == "done"
        assert last.data["message_id"] == reply.id
        assert reply.status == "complete"
        assert reply.content == LONG_REPLY
        assert user_msg.status == "answered"
    else:
        assert last.event == "error"
        assert last.data["code"] == "interrupted"
        assert last.data["message_id"] == reply.id
        assert reply.status == "interrupted"
        assert user_msg.status == "pending"  # cut by shutdown: answered after the next start
        assert reply.content
        assert LONG_REPLY.startswith(reply.content)
        assert reply.content != LONG_REPLY
        assert streamed == reply.content  # the client saw exactly what was stored
    assert waiting is not None
    assert waiting.content == "and then?"
    # Queued behind it: a draining daemon starts no new turn, even within the grace period. It is
    # kept pending, and answered after the next start (after the cut one, when it was cut).
    assert waiting.status == "pending"
    fake_openai.chat_delay_per_token = 0.0
    again = serve(home)
    with httpx.Client(base_url=again.url, timeout=30) as client:

        def complete() -> dict[int, str]:
            found = client.get("/v1/channels/general/messages").json()["messages"]
            return {m["reply_to"]: m["content"] for m in found if m["status"] == "complete"}

        answered = wait_for(lambda: len(complete()) == 2 and complete(), 60, "both messages' replies")
    assert list(answered) == [user_id, waiting.id]  # the cut one first, then the one behind it
    assert answered[waiting.id] == "echo: bob: and then?"  # alice spoke here too: bob is named
    again.proc.send_signal(signal.SIGTERM)
    assert again.proc.wait(30) == 0


def test_a_dotenv_file_where_the_daemon_runs_lends_no_key_to_a_persona(tmp_path, fake_openai) -> None:
    """agentd's keys come from the environment it was started with. A ``.env`` file in the
    directory it runs in (litellm loads one when imported, unless told not to) names the variable
    the persona's key is read from: the turn fails for want of it, and the model's server is
    never sent the file's key."""
    persona = fake_persona(fake_openai.url).replace(KEY_ENV, "DOTENV_ONLY_KEY")
    home = write_home(tmp_path / "home", '[embedding]\nprovider = "none"\n', {"fake": persona})
    work = tmp_path / "work"
    work.mkdir()
    (work / ".env").write_text("DOTENV_ONLY_KEY=from-dotenv\nOPENAI_API_KEY=from-dotenv\n")
    daemon = Serve(home, cwd=work)
    try:
        with httpx.Client(base_url=daemon.url, timeout=30) as client:
            posted = client.post("/v1/channels/general/messages", json={"persona": "fake", "user": "a", "text": "hi"})
            assert posted.status_code == 202, posted.text

            def settled() -> list[dict[str, Any]]:
                stored = client.get("/v1/channels/general/messages").json()["messages"]
                return stored if stored[0]["status"] != "pending" else []

            stored = wait_for(settled, 60, "the message to be answered or to fail")
        assert [(m["role"], m["status"]) for m in stored] == [("user", "failed")], stored
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(30) == 0
        assert '"code": "llm_auth"' in "".join(daemon.stderr)
        assert "needs DOTENV_ONLY_KEY" in "".join(daemon.stderr)
        assert fake_openai.authorizations == []
    finally:
        daemon.stop()


def test_agentd_post_prints_the_reply_of_a_running_daemon(daemons, fake_openai) -> None:
    d = daemons('[channels.general]\npersonas = ["fake"]\n')
    fake_openai.queue(Turn(text="Hello from the daemon."))
    result = agentd_cli("post", "general", "hi there", "--user", "alice", "--url", d.url, config=d.home)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Hello from the daemon."
    stored = d.messages("general")
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "hi there"),
        ("assistant", "Hello from the daemon."),
    ]
    refused = agentd_cli("post", "nowhere", "hi", "--url", d.url, config=d.home)
    assert refused.returncode == 2
    assert "bound to no persona" in refused.stderr
    down = agentd_cli("post", "general", "hi", "--url", "http://127.0.0.1:9", config=d.home)
    assert down.returncode == 1
    assert "agentd is not running at http://127.0.0.1:9 (connection refused)" in down.stderr


def test_the_example_terminal_adapter_bridges_stdin_to_a_channel(daemons, fake_openai) -> None:
    d = daemons('[channels.general]\npersonas = ["fake"]\n')
    fake_openai.queue(Turn(text="First answer."), Turn(text="Second answer."))
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "terminal_adapter.py"),
            "--url",
            d.url,
            "--channel",
            "general",
            "--user",
            "tess",
        ],
        input="hello\nhow are you?\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "fake> First answer." in result.stdout
    assert "fake> Second answer." in result.stdout
    assert result.stdout.index("First answer.") < result.stdout.index("Second answer.")
    assert [m["author"] for m in d.messages("general") if m["role"] == "user"] == ["tess", "tess"]
