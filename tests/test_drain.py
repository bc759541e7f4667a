"""SIGTERM during a backlog: ``agentd serve`` (local actors, and worker processes) stops
starting turns once it drains, and a restart answers every accepted message exactly once,
the ones whose reply shutdown cut included."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from agentd.app import App
from agentd.config import load_config
from tests.conftest import write_home
from tests.support import wait_for
from tests.support.fakeopenai import FakeOpenAI, fake_persona
from tests.support.serve import Serve
from tests.support.workers import channels_of_both_workers

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow

#: The words of each message; the fake model echoes them one every ``DELAY`` seconds (about 5 s a reply).
WORDS = 24
DELAY = 0.2


def _statuses(home: Path) -> tuple[dict[int, str], dict[int, list[str]]]:
    """The user messages' statuses, and each one's replies' statuses (in id order)."""
    app = App(load_config(home, environ={}))
    try:
        with app.store.read() as conn:
            rows = conn.exec_driver_sql("SELECT id, role, status, reply_to FROM messages ORDER BY id").fetchall()
    finally:
        app.close()
    users = {int(mid): str(status) for mid, role, status, _r in rows if role == "user"}
    replies: dict[int, list[str]] = {}
    for _mid, role, status, reply_to in rows:
        if role == "assistant":
            replies.setdefault(int(reply_to), []).append(str(status))
    return users, replies


def _post_backlog(url: str, channels: list[str]) -> list[int]:
    """Three messages to each channel, round-robin; their ids, all accepted (202)."""
    ids: list[int] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(3):
            for channel in channels:
                text = " ".join(f"w{i}{n}" for n in range(WORDS))
                answer = client.post(
                    f"/v1/channels/{channel}/messages", json={"persona": "fake", "user": "ann", "text": text}
                )
                assert answer.status_code == 202, answer.text
                ids.append(int(answer.json()["id"]))
    return ids


@pytest.mark.parametrize("workers", [0, 2], ids=["actors", "workers"])
@pytest.mark.parametrize(("grace", "cut"), [(12.0, False), (0.5, True)], ids=["finish", "cut"])
def test_sigterm_during_a_backlog_starts_no_new_turn_and_a_restart_answers_every_message(
    tmp_path: Path, fake_openai: FakeOpenAI, workers: int, grace: float, cut: bool
) -> None:
    """Nine posts over three channels to a persona whose model takes about 5 s; SIGTERM once the
    first turn of each channel streams. The draining daemon starts none of the six queued turns
    (the model is asked three times, not more); with a long grace the three running replies
    complete, with a short one they are cut (the partial kept as ``interrupted``). Either way the
    cut and the queued messages stay pending, and the next start answers each once, in order."""
    config = (
        f'[embedding]\nprovider = "none"\n[daemon]\nshutdown_grace_seconds = {grace}\n[runtime]\nworkers = {workers}\n'
    )
    home = write_home(tmp_path, config, {"fake": fake_persona(fake_openai.url)})
    fake_openai.chat_delay_per_token = DELAY
    first = Serve(home)
    try:
        ids = _post_backlog(first.url, channels_of_both_workers(4)[:3])
        wait_for(lambda: len(fake_openai.chat_requests()) >= 3 and fake_openai.streaming.is_set(), 60, "3 turns")
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(60) == 0, "".join(first.stderr)
    finally:
        first.stop()
    assert len(fake_openai.chat_requests()) == 3  # no queued turn started while draining
    users, replies = _statuses(home)
    running, queued = ids[:3], ids[3:]
    assert all(users[mid] == "pending" for mid in queued)
    assert all(mid not in replies for mid in queued)
    for mid in running:
        if cut:  # what was streamed, if anything was yet, is kept as interrupted; the message waits
            assert replies.get(mid, []) in ([], ["interrupted"])
            assert users[mid] == "pending"
        else:
            assert replies[mid] == ["complete"]
            assert users[mid] == "answered"

    fake_openai.chat_delay_per_token = 0.0
    again = Serve(home)
    try:

        def all_answered() -> bool:
            users, _ = _statuses(home)
            return all(users[mid] == "answered" for mid in ids)

        wait_for(all_answered, 60, "every accepted message to be answered after the restart")
        again.proc.send_signal(signal.SIGTERM)
        assert again.proc.wait(60) == 0, "".join(again.stderr)
    finally:
        again.stop()
    _, replies = _statuses(home)
    for mid in ids:  # one complete reply each (a cut one keeps its partial before it)
        assert replies[mid].count("complete") == 1, (mid, replies[mid])
        assert replies[mid][-1] == "complete"
    asked = fake_openai.chat_requests()
    assert len(asked) == 3 + (9 if cut else 6)  # after the restart: once for each message not answered
    # Each channel's messages were answered in the order they were posted.
    _assert_in_order(home, ids)


def _assert_in_order(home: Path, ids: list[int]) -> None:
    app = App(load_config(home, environ={}))
    try:
        with app.store.read() as conn:
            rows = conn.exec_driver_sql(
                "SELECT channel, reply_to FROM messages WHERE role = 'assistant' AND status = 'complete' ORDER BY id"
            ).fetchall()
    finally:
        app.close()
    by_channel: dict[str, list[int]] = {}
    for channel, reply_to in rows:
        by_channel.setdefault(str(channel), []).append(int(reply_to))
    for answered in by_channel.values():
        assert answered == sorted(answered)
    assert sorted(m for a in by_channel.values() for m in a) == sorted(ids)
