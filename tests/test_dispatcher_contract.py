"""The dispatcher contract: one set of behaviours, run against every way agentd runs turns.

A daemon chooses its dispatcher once (agentd/runtime/runtime.py): local actors in its own
process (SQLite, ``[runtime] workers = 0``), a pool of worker processes (SQLite, ``workers``
above 0, what ``agentd serve`` runs by default on two cores or more), or the cluster router
(PostgreSQL, which several daemons may share). The ``dispatcher`` fixture (conftest.py, on
:class:`tests.support.dispatch.Dispatch`) is parametrised over
the three (:data:`DISPATCHERS`), the way pykka runs one suite over every actor runtime, so each
behaviour below runs once per dispatcher, against ``agentd serve`` as installed, in a subprocess.

How to add a behaviour (rooms, schedules, approvals, ...): write a test here that takes
``dispatcher: Dispatch`` (and ``fake_openai`` to script the model), start the daemon with
``dispatcher.start(config)`` (extra TOML: the dispatcher's own settings are added), post with
:meth:`Dispatch.post`, read back with :meth:`Dispatch.replies` / :meth:`Dispatch.wait_answered`,
and use :meth:`Dispatch.crash` (SIGKILL the process that runs the turns, and for a daemon that
ran them itself, start another on the same store), :meth:`Dispatch.stop` (SIGTERM and its exit
status) and :meth:`Dispatch.restart`. Assert only what must hold for every dispatcher; what is one
dispatcher's own mechanics stays in its module (test_workers.py, test_cluster.py).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import follow, wait_for
from tests.support.dispatch import SLOW_DELAY, SLOW_WORDS, Dispatch, assert_in_order_once, by_channel
from tests.support.fakeopenai import FakeOpenAI, Turn
from tests.support.workers import channels_of_both_workers

pytestmark = pytest.mark.slow


def test_messages_of_a_channel_are_answered_once_in_order(dispatcher: Dispatch) -> None:
    dispatcher.start()
    channels = channels_of_both_workers(4)
    ids = dispatcher.accept(channels, 4)
    assert_in_order_once(dispatcher.wait_answered(ids), by_channel(channels, ids))


def test_after_a_crash_of_the_process_running_turns_every_accepted_message_is_answered_once(
    dispatcher: Dispatch, fake_openai: FakeOpenAI
) -> None:
    dispatcher.start()
    fake_openai.chat_delay_per_token = SLOW_DELAY
    channels = channels_of_both_workers(2)
    ids = dispatcher.accept(channels, 3, words=SLOW_WORDS)
    wait_for(lambda: fake_openai.streaming.is_set(), 60, "a reply streaming")
    dispatcher.crash()
    fake_openai.chat_delay_per_token = 0.0
    assert_in_order_once(dispatcher.wait_answered(ids), by_channel(channels, ids))


def test_sigterm_drains_starts_no_queued_turn_and_the_next_daemon_answers_the_rest_once(
    dispatcher: Dispatch, fake_openai: FakeOpenAI
) -> None:
    dispatcher.start()
    fake_openai.chat_delay_per_token = SLOW_DELAY
    channels = channels_of_both_workers(2)
    ids = dispatcher.accept(channels, 3, words=SLOW_WORDS)
    wait_for(lambda: len(fake_openai.chat_requests()) >= 2, 60, "a turn running in each channel")
    assert dispatcher.stop() == 0, "".join(dispatcher.daemons[-1].stderr)
    assert len(fake_openai.chat_requests()) == 2  # the running turns finished or were cut; no queued one started
    completed = len(dispatcher.replies())  # within the grace period, or cut (kept as interrupted)
    fake_openai.chat_delay_per_token = 0.0
    dispatcher.restart()
    assert_in_order_once(dispatcher.wait_answered(ids), by_channel(channels, ids))
    # The next daemon asked the model once for each message not answered before.
    assert len(fake_openai.chat_requests()) == 2 + len(ids) - completed


def test_past_the_channels_bound_a_post_is_refused_with_429_and_nothing_is_stored(
    dispatcher: Dispatch, fake_openai: FakeOpenAI
) -> None:
    dispatcher.start(daemon="max_pending = 10\nmax_pending_per_channel = 2\n")
    fake_openai.queue(Turn(hang=True, text="held"))
    first = dispatcher.post("dm-a", "one")
    assert first.status_code == 202, first.text
    wait_for(lambda: fake_openai.hanging == 1, 60, "the first turn to wait on the model")
    assert dispatcher.post("dm-a", "two").status_code == 202
    refused = dispatcher.post("dm-a", "three")
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "overloaded"
    assert int(refused.headers["retry-after"]) >= 1
    stored = httpx.get(f"{dispatcher.url}/v1/channels/dm-a/messages", timeout=30).json()["messages"]
    assert [m["content"] for m in stored if m["role"] == "user"] == ["one", "two"]
    fake_openai.release()
    dispatcher.wait_answered([int(first.json()["id"])])


def test_a_follower_sees_the_message_the_turns_events_and_the_reply_in_order(dispatcher: Dispatch) -> None:
    dispatcher.start()

    def done(events: list[Any]) -> bool:
        return any(e.event == "done" for e in events) and sum(e.event == "message" for e in events) >= 2

    with httpx.Client(base_url=dispatcher.url, timeout=60) as client:
        follower, thread = follow(client, "dm-feed", until=done)
        wait_for(follower.ready.is_set, 30, "the follower to connect")
        posted = dispatcher.post("dm-feed", "hello there")
        assert posted.status_code == 202
        thread.join(60)
    events = follower.snapshot()
    kinds = [e.event for e in events]
    assert "done" in kinds, kinds
    messages = [e for e in events if e.event == "message"]
    assert [m.data["role"] for m in messages] == ["user", "assistant"]
    assert messages[0].data["id"] == posted.json()["id"]
    assert messages[1].data["reply_to"] == posted.json()["id"]
    assert kinds.index("message") < kinds.index("done")  # the user message before its turn's end
