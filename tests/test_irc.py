"""The IRC adapter against a real IRC server (Debian's ngircd on a loopback port) and a
real daemon (``agentd serve`` in a subprocess), each started and killed by the test:
rooms, private messages, long replies split to IRC's limit, and every message
answered exactly once across a daemon kill and an IRC server restart."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentd.adapters import split_text
from tests.conftest import write_home
from tests.support import SSE, follow, wait_for
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, fake_persona
from tests.support.processes import Process, listening, serve_on_port_0, start_on_a_free_port

NGIRCD = shutil.which("ngircd") or "/usr/sbin/ngircd"
pytestmark = [
    pytest.mark.skipif(
        not os.access(NGIRCD, os.X_OK), reason="ngircd is not installed (apt-get install ngircd; .ci/run does)"
    ),
    pytest.mark.slow,
]
AGENTD = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"


@pytest.fixture
def ngircd(tmp_path: Path) -> Iterator[tuple[int, Process]]:
    """ngircd on loopback. It cannot listen on port 0: started on a free port, again on another if that
    one was taken before it bound it (:func:`start_on_a_free_port`)."""

    def start(port: int) -> Process:
        conf = tmp_path / "ngircd.conf"
        conf.write_text(
            textwrap.dedent(f"""\
            [Global]
            Name = irc.agentd.test
            Info = agentd test server
            Listen = 127.0.0.1
            Ports = {port}
            MotdPhrase = "agentd tests"
            [Limits]
            MaxConnectionsIP = 0
            MaxNickLength = 30
            PingTimeout = 120
            PongTimeout = 30
            [Options]
            DNS = no
            Ident = no
            PAM = no
            """)
        )
        (tmp_path / "ngircd.log").unlink(missing_ok=True)
        return Process([NGIRCD, "--nodaemon", "--config", str(conf)], tmp_path / "ngircd.log")

    def ready(port: int, process: Process) -> bool:
        return f"Now listening on [127.0.0.1]:{port} " in process.tail(100_000)

    port, server = start_on_a_free_port(start, ready, "ngircd", 20)
    yield port, server
    server.stop()


class IrcUser:
    """A plain IRC client (a second connection), written independently of the adapter."""

    def __init__(self, port: int, nick: str) -> None:
        self.port, self.nick = port, nick
        self.received: list[tuple[str, str, str]] = []  # (sender, target, text)
        self.notices: list[tuple[str, str, str]] = []  # NOTICEs, likewise
        self.buffer = b""
        self.connect()

    def connect(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.buffer = b""
        self.send(f"NICK {self.nick}", f"USER {self.nick} 0 * :{self.nick}")
        self.wait(lambda line: line.split()[1:2] == ["001"], "registration")

    def send(self, *lines: str) -> None:
        self.sock.sendall("".join(f"{line}\r\n" for line in lines).encode())

    def join(self, room: str) -> None:
        self.send(f"JOIN {room}")
        self.wait(lambda line: " 366 " in line, "the JOIN")

    def names(self, room: str) -> set[str]:
        """The nicks in ``room`` now, asked with NAMES (whoever joined before or after us)."""
        self.send(f"NAMES {room}")
        lines: list[str] = []
        self.wait(lambda line: " 366 " in line or (" 353 " in line and bool(lines.append(line))), "NAMES")
        return {n.lstrip("@+%&~").lower() for line in lines for n in line.split(" :", 1)[-1].split()}

    def wait_in(self, room: str, nicks: set[str], timeout: float = 60.0) -> None:
        """Until every one of ``nicks`` is in ``room`` (asked twice a second: the server throttles floods)."""
        wait_for(lambda: nicks <= self.names(room), timeout, f"{sorted(nicks)} to join {room}", every=0.5)

    def say(self, target: str, text: str) -> None:
        self.send(f"PRIVMSG {target} :{text}")

    def _lines(self, timeout: float) -> list[str]:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return []
        if not data:
            raise ConnectionError("closed")
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\r\n")
        out = []
        for raw in lines:
            line = raw.decode("utf-8")
            if line.startswith("PING"):
                self.send("PONG" + line[4:])
            parts = line.split(" ", 3)
            if len(parts) == 4 and parts[1] in ("PRIVMSG", "NOTICE"):
                into = self.received if parts[1] == "PRIVMSG" else self.notices
                into.append((parts[0][1:].split("!")[0], parts[2], parts[3][1:]))
            out.append(line)
        return out

    def wait(self, test, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(test(line) for line in self._lines(0.2)):
                return
        raise AssertionError(f"timed out waiting for {what}")

    def texts(self, timeout: float = 0.2) -> list[str]:
        self._lines(timeout)
        return [text for _sender, _target, text in self.received]

    def until(self, predicate, what: str, timeout: float = 90.0) -> list[str]:  # type: ignore[no-untyped-def]
        return wait_for(lambda: predicate(self.texts()) and self.texts(0.01), timeout, what)


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path, fake_openai: FakeOpenAI, ngircd):
    """ngircd, `agentd serve` (on port 0, restarted on the port it got), and `agentd adapter irc`; returns controls.
    Parametrized indirectly with more personas ({name: channels}), adapter options ("args": [...]) and
    environment variables of both processes ("env": {...}, e.g. config overrides)."""
    irc_port, server = ngircd
    personas = {
        "fake": fake_persona(fake_openai.url, channels='["dm-*"]'),
        "other": fake_persona(fake_openai.url, "other"),
    }
    more = dict(getattr(request, "param", {}))
    extra_args = more.pop("args", [])
    more_env = more.pop("env", {})
    for name, channels in more.items():
        personas[name] = fake_persona(fake_openai.url, name, channels=channels)
    home = write_home(
        tmp_path / "home",
        '[embedding]\nprovider = "none"\n[channels.general]\npersonas = ["fake", "other"]\n',
        personas,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env[KEY_ENV] = "test-key"
    env["AGENTD_LOGGING__LEVEL"] = "info"  # their logs are shown when the test fails: say where time went
    env.update(more_env)
    url, daemon = serve_on_port_0([AGENTD, "--config", str(home), "serve"], tmp_path / "daemon.log", env)
    state = tmp_path / "adapter-state.json"
    adapter_args = [
        AGENTD, "--config", str(home), "adapter", "irc", "--server", f"127.0.0.1:{irc_port}",
        "--nick", "agentbot", "--channel", "#a=general", "--url", url, "--state", str(state),
        # The room's replies said by the bot's nick, unless a test gives each persona its own (--voices).
        "--no-voices", *extra_args,
    ]  # fmt: skip
    adapter = Process(adapter_args, tmp_path / "adapter.log", env)
    try:  # the processes stop, and their logs are shown, however the test (or this setup) ends
        alice = IrcUser(irc_port, "alice")
        alice.join("#a")
        alice.wait_in("#a", {"agentbot"})

        class Stack:
            pass

        s = Stack()
        s.irc_port, s.server, s.daemon, s.adapter, s.alice, s.url, s.state = (
            irc_port, server, daemon, adapter, alice, url, state,
        )  # fmt: skip
        yield s
    finally:
        adapter.stop()
        daemon.stop()
        for name in ("adapter.log", "daemon.log"):
            print(f"--- {name}\n{(tmp_path / name).read_text(errors='replace')[-8000:]}")


def test_rooms_private_messages_and_long_replies(stack, fake_openai) -> None:
    alice = stack.alice
    alice.say("#a", "just chatting, not to the bot")
    alice.say("#a", "agentbot: hello there")
    alice.until(lambda t: "alice: echo: hello there" in t, "the room reply")
    alice.say("agentbot", "a private question")
    alice.until(lambda t: "echo: a private question" in t, "the private reply")
    private = [r for r in alice.received if r[2] == "echo: a private question"]
    assert private[0][:2] == ("agentbot", "alice")  # sent to alice, not to the room
    # Addressed to a persona by name: the daemon picks it (here "other", bound to the room's channel).
    alice.say("#a", "other: who are you?")
    alice.until(lambda t: "alice: echo: other: who are you?" in t, "other's reply")
    long = " ".join(["naïve café 😀 déjà-vu"] * 60)
    fake_openai.queue(Turn(text=long))
    alice.say("#a", "agentbot: a long answer please")

    def whole(texts: list[str]) -> bool:
        """Every piece of the long reply has arrived (pieces end at any word, so count the text)."""
        said = " ".join(x for x in texts if "déjà" in x)
        return said.startswith("alice: ") and len(said) >= len("alice: ") + len(long)

    parts = alice.until(whole, "the whole long reply")
    pieces = [p for p in parts if "déjà" in p]
    # 512 bytes a line, less CR LF, the command and the longest prefix the server may show others.
    limit = 512 - 2 - len(":agentbot!~agentbot@ PRIVMSG #a :") - 64
    assert pieces[0].startswith("alice: ")
    assert all(300 < len(p.encode()) <= limit for p in pieces[:-1])
    assert " ".join(pieces)[len("alice: ") :] == long  # split only at spaces, nothing lost
    assert "just chatting" not in str(fake_openai.chat_requests())
    authors = {r[2]: r for r in alice.received}
    assert authors["alice: echo: hello there"][1] == "#a"


@pytest.mark.parametrize("stack", [{"args": ["--voices"]}], indirect=True)
def test_each_persona_of_a_room_speaks_with_its_own_nick_and_answers_privately(stack, fake_openai) -> None:
    """#a's channel is a room (fake and other): each persona joins with its own nick; a message
    naming both is answered by both, each under its nick, and they answer each other (the echo
    names them); a private message to other's nick is answered by other, privately."""
    alice = stack.alice

    alice.wait_in("#a", {"fake", "other"})
    alice.say("#a", "@fake @other what do you think?")
    heard = lambda: [(s, x) for s, t, x in alice.received if t == "#a"]  # noqa: E731
    alice.until(lambda _t: any(s == "other" and "echo: fake: " in x for s, x in heard()), "other answering fake")
    said = heard()
    assert ("fake", "alice: echo: @fake @other what do you think?") in said
    # other answers alice's message after fake (it was asked for with fake's reply): said as the room's.
    assert ("other", "echo: @fake @other what do you think?") in said
    assert not [s for s, _x in said if s == "agentbot"]
    alice.say("other", "just between us")
    alice.until(lambda t: "echo: just between us" in t, "other's private reply")
    private = [r for r in alice.received if r[2] == "echo: just between us"]
    assert private[0][:2] == ("other", "alice")
    # The request that answered it (the room's personas may still be answering each other).
    asked = [r["messages"] for r in fake_openai.chat_requests() if "just between us" in str(r["messages"][-1])]
    assert len(asked) == 1, asked
    assert "You are other," in asked[0][0]["content"]


def test_every_message_is_answered_once_across_a_daemon_kill_and_an_irc_restart(stack, fake_openai, ngircd) -> None:
    alice = stack.alice
    fake_openai.chat_delay_per_token = 0.4
    for i in (1, 2, 3):
        alice.say("#a", f"agentbot: q{i} one two three")
    wait_for(lambda: len(fake_openai.chat_requests()) >= 1 and fake_openai.streaming.is_set(), 60, "a streaming reply")
    stack.daemon.stop(signal.SIGKILL)  # mid-reply
    alice.say("#a", "agentbot: q4 one two three")  # while the daemon is down
    fake_openai.chat_delay_per_token = 0.0
    stack.daemon.start()
    expected = [f"alice: echo: q{i} one two three" for i in (1, 2, 3, 4)]
    alice.until(lambda t: all(e in t for e in expected), "every reply after the daemon restart")
    # Now the IRC server goes away while a reply is being written, and comes back.
    fake_openai.chat_delay_per_token = 0.3
    alice.say("#a", "agentbot: q5 one two three")
    wait_for(lambda: fake_openai.streaming.is_set(), 60, "q5 streaming")
    _port, server = ngircd
    server.stop()
    server.start()
    wait_for(lambda: listening(stack.irc_port), 20, "ngircd again")
    alice.connect()
    alice.join("#a")
    fake_openai.chat_delay_per_token = 0.0
    alice.until(lambda t: "alice: echo: q5 one two three" in t, "q5's reply after the IRC restart")
    alice.say("#a", "agentbot: sentinel")  # replies arrive in order: any repeat would come before this one
    texts = alice.until(lambda t: "alice: echo: sentinel" in t, "the sentinel")
    replies = [t for t in texts if t.startswith("alice: echo: q")]
    assert sorted(replies) == [*expected, "alice: echo: q5 one two three"], replies


#: A short grace period: a turn still running when the daemon stops is cut (its partial kept).
CUT_ENV = {"AGENTD_DAEMON__SHUTDOWN_GRACE_SECONDS": "0.5", "AGENTD_LOGGING__LEVEL": "info"}


@pytest.mark.parametrize("stack", [{"env": CUT_ENV}], indirect=True)
def test_a_private_reply_cut_by_a_graceful_stop_is_shown_cut_and_the_full_answer_follows_the_restart(
    stack, fake_openai
) -> None:
    """(A room of several personas says only complete replies: there the full answer alone is said.)"""
    alice = stack.alice
    fake_openai.queue(Turn(text="so far so good and then more", pause_after=3))

    def streamed(events: list[SSE]) -> bool:
        return "so far so" in "".join(e.data.get("text", "") for e in events if e.event == "token_delta")

    with httpx.Client(base_url=stack.url, timeout=60) as client:
        follower, thread = follow(client, "dm-irc-alice", until=streamed)
        wait_for(follower.ready.is_set, 30, "the follower to connect")
        alice.say("agentbot", "a question")
        thread.join(120)  # the three words reached the daemon: a cut now keeps them
        assert streamed(follower.snapshot()), follower.snapshot()
    stack.daemon.stop()  # SIGTERM: the turn is cut after the grace period and its partial stored
    fake_openai.release()
    fake_openai.hold()
    fake_openai.queue(Turn(text="the whole answer", pause_after=0))  # waits until the cut one is seen
    stack.daemon.start()  # answers the message again
    alice.until(lambda t: any(x.endswith("[…]") for x in t), "the cut reply")
    fake_openai.release()
    alice.say("agentbot", "sentinel")  # replies arrive in order: the full answer comes before this one
    texts = alice.until(lambda t: "echo: sentinel" in t, "the sentinel")
    cut, full = [t for t in texts if t.startswith(("so far", "the whole"))]
    assert cut.startswith("so far so"), cut
    assert cut.endswith("[…]"), cut
    assert full == "the whole answer"


@pytest.mark.parametrize("stack", [{"ircbot": '["*"]'}], indirect=True)
def test_a_refused_private_message_is_answered_with_a_notice_once_a_minute(stack, fake_openai) -> None:
    """Two personas' globs match dm-irc-alice (fake: dm-*, ircbot: *): the daemon refuses a private
    message naming neither; alice gets a NOTICE naming both, not silence, and not one per message."""
    alice = stack.alice
    alice.say("agentbot", "hello, anyone?")
    wait_for(lambda: alice.texts() is not None and alice.notices, 60, "the notice")
    sender, target, text = alice.notices[0]
    assert (sender, target) == ("agentbot", "alice")
    assert text.startswith("two personas answer here: start with "), text
    assert "fake:" in text, text
    assert "ircbot:" in text, text
    alice.say("agentbot", "still there?")  # refused again, but noticed at most once a minute
    alice.say("agentbot", "ircbot: then you, please")  # naming one works
    alice.until(lambda t: "echo: ircbot: then you, please" in t, "ircbot's private reply")
    assert len(alice.notices) == 1, alice.notices
    assert not any("hello, anyone" in t or "still there" in t for t in alice.texts()), "a refused message answered"
    assert len(fake_openai.chat_requests()) == 1


@pytest.mark.parametrize("stack", [{"ircbot": '["*"]', "args": ["--persona", "ircbot"]}], indirect=True)
def test_persona_option_answers_private_messages_that_name_none(stack, fake_openai) -> None:
    """With --persona ircbot, a private message naming no persona goes to ircbot (no refusal, no
    notice); one that names another persona still goes to that one."""
    alice = stack.alice
    alice.say("agentbot", "who answers this?")
    alice.until(lambda t: "echo: who answers this?" in t, "the private reply")
    assert "You are ircbot" in str(fake_openai.chat_requests()[-1]["messages"][0])
    alice.say("agentbot", "fake: and this?")
    alice.until(lambda t: "echo: fake: and this?" in t, "fake's private reply")
    assert "You are fake" in str(fake_openai.chat_requests()[-1]["messages"][0])
    assert alice.notices == [] or all(n[0] != "agentbot" for n in alice.notices)


def test_split_text_keeps_words_utf8_and_graphemes_whole() -> None:
    flag, family, accent = "🇫🇷", "👨‍👩‍👧", "e\u0301"
    text = f"{'word ' * 30}{flag * 10} {family * 6} {accent * 40}\nsecond paragraph"
    lines = split_text(text, 40)
    assert all(len(line.encode()) <= 40 for line in lines)
    assert "\n".join(lines).replace("\n", "").replace(" ", "") == text.replace("\n", "").replace(" ", "")
    for line in lines:
        assert not line.startswith((" ", "\u0301", "\u200d"))
        assert not line.endswith("\u200d")
        assert line.count("🇫") == line.count("🇷")  # no flag cut in half
    assert lines[-1] == "second paragraph"
    assert split_text("short", 40) == ["short"]


BUSY_ENV = {"AGENTD_DAEMON__MAX_PENDING_PER_CHANNEL": "1", "AGENTD_LOGGING__LEVEL": "info"}


@pytest.mark.parametrize("stack", [{"env": BUSY_ENV}], indirect=True)
def test_messages_refused_while_the_channel_is_busy_are_posted_again_after_retry_after(stack, fake_openai) -> None:
    """The daemon takes one message per channel at a time; alice says three while the first reply is
    slow. The adapter is refused (429), waits out Retry-After, posts again: every message is answered
    once, in order, and nobody is told the daemon is busy."""
    alice = stack.alice
    fake_openai.chat_delay_per_token = 0.3
    for i in (1, 2, 3):
        alice.say("#a", f"agentbot: busy{i} one two three")
    wait_for(lambda: "daemon_busy" in (stack.adapter.log.read_text()), 60, "the adapter to be refused")
    fake_openai.chat_delay_per_token = 0.0
    alice.say("#a", "agentbot: sentinel")
    texts = alice.until(lambda t: "alice: echo: sentinel" in t, "the sentinel")
    replies = [t for t in texts if t.startswith("alice: echo: busy")]
    assert replies == [f"alice: echo: busy{i} one two three" for i in (1, 2, 3)], replies
    assert alice.notices == []
