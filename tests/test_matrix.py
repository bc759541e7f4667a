"""The Matrix adapter against a real homeserver (Synapse from PyPI, tests/support/synapse.py) and a real
daemon (``agentd serve`` in a subprocess), with people written independently of the adapter
(httpx on the client-server API): a reply in a room when addressed, in Markdown and with typing
notifications; a direct message; a thread reply that stays in the thread; a refused post answered
with a notice; an encrypted room refused; two personas with Matrix accounts of their own talking
to each other in a room, each as its own user, and a direct message to one of them; every message
answered exactly once across a SIGKILL of the daemon and a restart of the homeserver.

Synapse's start costs several seconds of CPU, so one homeserver, daemon and adapter serve the
whole module; the test that kills and restarts them runs last and leaves them running."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import agentd_cli, write_home
from tests.support import wait_for
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, fake_persona
from tests.support.processes import Process, serve_on_port_0
from tests.support.synapse import SERVER_NAME, MatrixUser, Synapse

AGENTD = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"
#: The first test also waits for the homeserver, the daemon and the adapter to start (CPU-heavy).
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
BOT = f"@agentbot:{SERVER_NAME}"
LOBBY = f"#lobby:{SERVER_NAME}"
DUO = f"#duo:{SERVER_NAME}"
BUDDY = f"@buddy:{SERVER_NAME}"
RESEARCHER = f"@researcher:{SERVER_NAME}"
#: The room of two personas, each with its own Matrix account (its password in the environment).
_DUO_CONFIG = f"""
[channels.duo]
personas = ["buddy", "researcher"]
answer = "addressed"
max_persona_turns = 1
[adapters.matrix.personas.buddy]
user_id = "{BUDDY}"
password_env = "BUDDY_MATRIX_PASSWORD"
[adapters.matrix.personas.researcher]
user_id = "{RESEARCHER}"
password_env = "RESEARCHER_MATRIX_PASSWORD"
"""


class Stack:
    """The homeserver, its people, the fake model, the daemon and the adapter."""

    synapse: Synapse
    alice: MatrixUser
    bob: MatrixUser
    lobby: str
    duo: str
    fake: FakeOpenAI
    daemon: Process
    adapter: Process
    url: str
    tmp: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack()
    s.tmp = tmp_path = tmp_path_factory.mktemp("matrix")
    s.synapse = Synapse(tmp_path / "synapse")
    s.synapse.start()
    s.fake = FakeOpenAI().start()
    try:
        s.synapse.register("agentbot", "bot-password")
        s.alice = s.synapse.register("alice", "alice-password")
        s.bob = s.synapse.register("bob", "bob-password")
        s.synapse.register("buddy", "buddy-password")
        s.synapse.register("researcher", "researcher-password")
        s.lobby = s.alice.create_room("lobby")
        s.duo = s.alice.create_room("duo")
        home = write_home(
            tmp_path / "home",
            '[embedding]\nprovider = "none"\n[channels.general]\npersonas = ["fake"]\n' + _DUO_CONFIG,
            {
                "buddy": fake_persona(s.fake.url, "buddy"),
                "researcher": fake_persona(s.fake.url, "researcher"),
                "fake": fake_persona(s.fake.url, channels='["dm-*", "matrix-*"]'),
                # bob's private channel matches two personas: a post there that names neither is refused.
                "helper": fake_persona(s.fake.url, "helper", channels='["dm-matrix-@bob*"]'),
            },
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
        env[KEY_ENV] = "test-key"
        s.url, s.daemon = serve_on_port_0([AGENTD, "--config", str(home), "serve"], tmp_path / "daemon.log", env)
        args = [
            AGENTD, "--config", str(home), "adapter", "matrix", "--homeserver", s.synapse.url, "--user", BOT,
            "--room", f"{LOBBY}=general", "--room", f"{DUO}=duo",
            "--url", s.url, "--state", str(tmp_path / "adapter-state.json"),
        ]  # fmt: skip
        secrets = {
            "AGENTD_MATRIX_PASSWORD": "bot-password",
            "BUDDY_MATRIX_PASSWORD": "buddy-password",
            "RESEARCHER_MATRIX_PASSWORD": "researcher-password",
        }
        s.adapter = Process(args, tmp_path / "adapter.log", {**env, **secrets})
        wait_for(lambda: _joined(s.alice, s.lobby, BOT), 90, "the adapter to join the lobby")
        yield s
    finally:
        for proc in ("adapter", "daemon"):
            if hasattr(s, proc):
                getattr(s, proc).stop()
        s.fake.stop()
        s.synapse.stop()
        for name in ("adapter.log", "daemon.log"):
            if (tmp_path / name).exists():
                print(f"--- {name}\n{(tmp_path / name).read_text(errors='replace')[-4000:]}")


def _joined(user: MatrixUser, room: str, member: str) -> bool:
    members = user.call("GET", f"/rooms/{room}/joined_members")["joined"]
    return member in members


def _bodies(events: list[dict[str, Any]]) -> list[str]:
    return [e["content"].get("body", "") for e in events]


def test_matrix_room_reply_when_addressed_in_markdown_with_typing(stack: Stack) -> None:
    alice, lobby = stack.alice, stack.lobby
    alice.send(lobby, "just chatting, not to the bot")
    asked = alice.send(lobby, "agentbot: hello there")
    replies = alice.until(lobby, BOT, lambda m: "echo: hello there" in _bodies(m), "the room reply")
    reply = next(e for e in replies if e["content"]["body"] == "echo: hello there")
    assert reply["content"]["msgtype"] == "m.text"
    assert reply["content"]["m.relates_to"] == {"m.in_reply_to": {"event_id": asked}}  # a rich reply to alice
    # A persona's name addresses the bot too; the reply is Markdown as HTML with a plain body, one message.
    stack.fake.chat_delay_per_token = 0.01  # a turn long enough (seconds) to see the typing notification
    long = "**Bold** and `code`:\n\n- one\n- two\n\n" + " ".join(["naïve café 😀 déjà-vu"] * 200)
    stack.fake.queue(Turn(text=long))
    alice.send(lobby, "fake: a long formatted answer please")
    replies = alice.until(lobby, BOT, lambda m: any("déjà" in b for b in _bodies(m)), "the formatted reply", 180)
    stack.fake.chat_delay_per_token = 0.0
    formatted = [e for e in replies if "déjà" in e["content"]["body"]]
    assert len(formatted) == 1, "a long reply is one message"
    content = formatted[0]["content"]
    assert content["body"] == long
    assert content["format"] == "org.matrix.custom.html"
    assert "<strong>Bold</strong>" in content["formatted_body"]
    assert "<li>one</li>" in content["formatted_body"]
    assert (lobby, BOT) in alice.typing, "no typing notification while the turn ran"
    assert "just chatting" not in str(stack.fake.chat_requests())


def test_matrix_direct_message_reply(stack: Stack) -> None:
    alice = stack.alice
    dm = alice.create_room(invite=[BOT], direct=True)
    wait_for(lambda: _joined(alice, dm, BOT), 60, "the adapter to accept the invitation")
    alice.send(dm, "a private question")  # no address needed in a direct room
    replies = alice.until(dm, BOT, lambda m: "echo: a private question" in _bodies(m), "the direct reply")
    assert _bodies(replies) == ["echo: a private question"]
    stored = httpx.get(
        f"{stack.url}/v1/channels/{'dm-matrix-@alice:' + SERVER_NAME}/messages", params={"after": 0}, timeout=10
    ).json()["messages"]
    assert [(m["role"], m["author"]) for m in stored][:1] == [("user", f"matrix:@alice:{SERVER_NAME}")]


def test_matrix_thread_reply_stays_in_the_thread(stack: Stack) -> None:
    """In a room the bot was invited to (its channel named after the alias: matrix-tea:<server>),
    what was said before it joined is history, not questions; a question in a thread is answered
    in the thread."""
    alice = stack.alice
    room = alice.create_room("tea")
    root = alice.send(room, "agentbot: a thread about tea, before the bot is here")
    alice.call("POST", f"/rooms/{room}/invite", {"user_id": BOT})
    wait_for(lambda: _joined(alice, room, BOT), 60, "the adapter to accept the invitation")
    asked = alice.send(room, "agentbot: green or black?", thread=root)
    replies = alice.until(room, BOT, lambda m: "echo: green or black?" in _bodies(m), "the thread reply")
    reply = next(e for e in replies if e["content"]["body"] == "echo: green or black?")
    relation = reply["content"]["m.relates_to"]
    assert relation["rel_type"] == "m.thread"
    assert relation["event_id"] == root
    assert relation["m.in_reply_to"] == {"event_id": asked}
    assert "before the bot is here" not in str(stack.fake.chat_requests())
    channel = f"matrix-tea:{SERVER_NAME}"
    stored = httpx.get(f"{stack.url}/v1/channels/{channel}/messages", params={"after": 0}, timeout=10).json()
    assert [m["content"] for m in stored["messages"]] == ["green or black?", "echo: green or black?"]


def test_matrix_refused_post_is_answered_with_a_notice(stack: Stack) -> None:
    """bob's private channel matches two personas (fake: dm-*, helper: dm-matrix-@bob*): the daemon
    refuses a post naming neither, and bob gets one notice saying what to do, not silence."""
    bob = stack.bob
    dm = bob.create_room(invite=[BOT], direct=True)
    wait_for(lambda: _joined(bob, dm, BOT), 60, "the adapter to accept bob's invitation")
    bob.send(dm, "hello, anyone?")
    notices = bob.until(dm, BOT, lambda m: any(e["content"]["msgtype"] == "m.notice" for e in m), "the notice")
    text = notices[0]["content"]["body"]
    assert notices[0]["content"]["msgtype"] == "m.notice"
    assert text.startswith("two personas answer here: start with "), text
    assert "fake:" in text, text
    assert "helper:" in text, text
    bob.send(dm, "still there?")  # refused again: noticed at most once a minute
    bob.send(dm, "helper: then you, please")
    events = bob.until(dm, BOT, lambda m: "echo: helper: then you, please" in _bodies(m), "helper's reply")
    assert [e["content"]["msgtype"] for e in events] == ["m.notice", "m.text"], _bodies(events)


def test_matrix_encrypted_room_is_refused_with_a_notice(stack: Stack) -> None:
    alice = stack.alice
    encryption = {"type": "m.room.encryption", "state_key": "", "content": {"algorithm": "m.megolm.v1.aes-sha2"}}
    room = alice.create_room(invite=[BOT], initial_state=[encryption])
    notices = alice.until(room, BOT, lambda m: len(m) >= 1, "the adapter's notice in the encrypted room")
    assert notices[0]["content"]["msgtype"] == "m.notice"
    assert "encrypted" in notices[0]["content"]["body"]
    wait_for(lambda: not _joined(alice, room, BOT), 60, "the adapter to leave the encrypted room")
    assert "encrypted_room_refused" in (stack.tmp / "adapter.log").read_text()


def test_matrix_each_persona_speaks_as_its_own_user_and_answers_its_direct_messages(stack: Stack) -> None:
    """#duo's channel binds buddy and researcher, each with a Matrix account of its own: a message
    naming both is answered by both, each reply sent by that persona's user (no name in front, none
    by the bot), and they answer each other (the echo names them); a direct message to researcher's
    user is answered by researcher's user, in researcher's own private channel."""
    alice, duo = stack.alice, stack.duo
    wait_for(lambda: _joined(alice, duo, BOT), 60, "the adapter to join #duo")
    asked = alice.send(duo, "@buddy @researcher what do you both think?")

    def talked() -> bool:
        alice.sync()
        return any("echo: buddy: " in b for b in _bodies(alice.messages_from(duo, RESEARCHER)))

    wait_for(talked, 120, "researcher answering buddy in #duo")
    buddy, researcher = _bodies(alice.messages_from(duo, BUDDY)), _bodies(alice.messages_from(duo, RESEARCHER))
    assert buddy[0] == "echo: @buddy @researcher what do you both think?", buddy
    assert "echo: @buddy @researcher what do you both think?" in researcher, researcher
    assert alice.messages_from(duo, BUDDY)[0]["content"]["m.relates_to"] == {"m.in_reply_to": {"event_id": asked}}
    assert not alice.messages_from(duo, BOT), "the bot spoke for a persona with an account of its own"
    stored = httpx.get(f"{stack.url}/v1/channels/duo/messages", params={"limit": 100}, timeout=10).json()
    said = [(m["persona"], m["content"]) for m in stored["messages"] if m["role"] == "assistant"]
    assert len(said) == len(buddy) + len(researcher), (said, buddy, researcher)  # each reply sent once
    assert {p for p, _c in said} == {"buddy", "researcher"}
    # A direct message to researcher's own user: answered by researcher, as that user.
    dm = alice.create_room(invite=[RESEARCHER], direct=True)
    wait_for(lambda: _joined(alice, dm, RESEARCHER), 60, "researcher's account to accept the invitation")
    alice.send(dm, "just between us")
    replies = alice.until(dm, RESEARCHER, lambda m: "echo: just between us" in _bodies(m), "researcher's reply")
    assert _bodies(replies) == ["echo: just between us"]
    assert not _joined(alice, dm, BOT)
    private = httpx.get(
        f"{stack.url}/v1/channels/dm-matrix-researcher-@alice:{SERVER_NAME}/messages", params={"after": 0}, timeout=10
    ).json()["messages"]
    assert [(m["role"], m["persona"]) for m in private] == [("user", "researcher"), ("assistant", "researcher")]
    assert "You are researcher," in stack.fake.chat_requests()[-1]["messages"][0]["content"]


def test_matrix_encrypted_direct_room_of_a_persona_is_refused_with_a_notice(stack: Stack) -> None:
    alice = stack.alice
    encryption = {"type": "m.room.encryption", "state_key": "", "content": {"algorithm": "m.megolm.v1.aes-sha2"}}
    room = alice.create_room(invite=[BUDDY], direct=True, initial_state=[encryption])
    notices = alice.until(room, BUDDY, lambda m: len(m) >= 1, "buddy's notice in the encrypted room")
    assert notices[0]["content"]["msgtype"] == "m.notice"
    assert "encrypted" in notices[0]["content"]["body"]
    wait_for(lambda: not _joined(alice, room, BUDDY), 60, "buddy's account to leave the encrypted room")


def test_matrix_adapter_help() -> None:
    result = agentd_cli("adapter", "matrix", "--help")
    assert result.returncode == 0
    assert "--homeserver" in result.stdout
    assert "AGENTD_MATRIX_TOKEN" in result.stdout


def test_matrix_persona_account_without_credentials_is_refused_by_name(tmp_path: Path) -> None:
    """A persona's account whose environment variable is unset: the adapter says which, and starts not."""
    config = tmp_path / "agentd.toml"
    config.write_text(
        '[adapters.matrix]\nhomeserver = "http://127.0.0.1:9"\nuser_id = "@bot:x"\n'
        '[adapters.matrix.personas.researcher]\nuser_id = "@researcher:x"\npassword_env = "RESEARCHER_PW"\n'
    )
    result = agentd_cli("adapter", "matrix", config=config, env={"AGENTD_MATRIX_PASSWORD": "secret"})
    assert result.returncode == 2, result
    assert "[adapters.matrix.personas.researcher]: no credentials for @researcher:x" in result.stderr
    assert "$RESEARCHER_PW" in result.stderr


def test_matrix_every_message_answered_once_across_a_daemon_kill_and_a_synapse_restart(stack: Stack) -> None:
    alice, lobby, fake = stack.alice, stack.lobby, stack.fake
    # The adapter's first sync skips what was said before it (by design): on a fresh stack (this
    # test first on its worker) wait for one answered message, so q1 is not said before that sync.
    alice.send(lobby, "agentbot: warm up")
    alice.until(lobby, BOT, lambda m: "echo: warm up" in _bodies(m), "the adapter's first answer")
    fake.chat_delay_per_token = 0.4
    streams_before = len(fake.chat_requests())
    for i in (1, 2, 3):
        alice.send(lobby, f"agentbot: q{i} one two three")
    wait_for(lambda: len(fake.chat_requests()) > streams_before and fake.streaming.is_set(), 60, "a streaming reply")
    stack.daemon.stop(signal.SIGKILL)  # mid-reply
    alice.send(lobby, "agentbot: q4 one two three")  # while the daemon is down
    fake.chat_delay_per_token = 0.0
    stack.daemon.start()
    expected = [f"echo: q{i} one two three" for i in (1, 2, 3, 4)]
    # A liveness bound, not a speed claim: the restart, its workers loading their models, the
    # adapter's posts waiting out their backoff, on a loaded machine.
    replied = lambda m: all(e in _bodies(m) for e in expected)  # noqa: E731
    alice.until(lobby, BOT, replied, "every reply after the restart", 240)
    # Now the homeserver goes away while a reply is being written, and comes back.
    fake.chat_delay_per_token = 0.3
    fake.streaming.clear()
    alice.send(lobby, "agentbot: q5 one two three")
    wait_for(lambda: fake.streaming.is_set(), 60, "q5 streaming")
    stack.synapse.stop()
    stack.synapse.start()
    fake.chat_delay_per_token = 0.0
    alice.until(lobby, BOT, lambda m: "echo: q5 one two three" in _bodies(m), "q5's reply after the restart", 120)
    alice.send(lobby, "agentbot: sentinel")  # replies arrive in order: any repeat would come before this one
    events = alice.until(lobby, BOT, lambda m: "echo: sentinel" in _bodies(m), "the sentinel", 120)
    replies = [b for b in _bodies(events) if b.startswith("echo: q")]
    assert sorted(replies) == [*expected, "echo: q5 one two three"], replies
    # Last, the adapter itself is killed and a message arrives meanwhile: it resumes from its sync token.
    stack.adapter.stop(signal.SIGKILL)
    alice.send(lobby, "agentbot: q6 one two three")
    stack.adapter.start()
    alice.until(lobby, BOT, lambda m: "echo: q6 one two three" in _bodies(m), "q6's reply after the adapter restart")
    alice.send(lobby, "agentbot: sentinel two")
    events = alice.until(lobby, BOT, lambda m: "echo: sentinel two" in _bodies(m), "the second sentinel", 120)
    replies = [b for b in _bodies(events) if b.startswith("echo: q")]
    assert sorted(replies) == [f"echo: q{i} one two three" for i in range(1, 7)], replies
    stored = httpx.get(f"{stack.url}/v1/channels/general/messages", params={"limit": 1000}, timeout=10).json()
    asked = [m["content"] for m in stored["messages"] if m["role"] == "user" and " one two three" in m["content"]]
    assert sorted(asked) == [f"q{i} one two three" for i in range(1, 7)], asked  # each posted once
