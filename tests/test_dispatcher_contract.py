"""The dispatcher contract: one set of behaviours, run against every way agentd runs turns.

A daemon chooses its dispatcher once (agentd/runtime/runtime.py): local actors in its own
process (SQLite, ``[runtime] workers = 0``), a pool of worker processes (SQLite, ``workers``
above 0, what ``agentd serve`` runs by default on two cores or more), or the cluster router
(PostgreSQL, which several daemons may share). The ``dispatcher`` fixture (conftest.py, on
:class:`tests.support.dispatch.Dispatch`) is parametrised over
the three (:data:`DISPATCHERS`), the way pykka runs one suite over every actor runtime, so each
behaviour below runs once per dispatcher, against ``agentd serve`` as installed, in a subprocess.

The behaviours: a channel's messages are answered once each, in order; after a crash of the
process running turns, every accepted message is answered once; SIGTERM drains (no queued turn
starts) and the next daemon answers the rest once; past a channel's bound a post is refused (429)
and nothing is stored; a follower sees the message, the turn's events and the reply in order; in a
room, the personas its rules name answer once each and hear each other by name; a schedule fires
once and is answered (and one due while no daemon ran fires once after the next start); a tool
call needing approval holds its turn until it is decided over HTTP, then the turn goes on once
with the tool's answer (approved) or the denial; a burst's later message, stored while the earlier
one was being answered, has that answer in its prompt.

How to add a behaviour: write a test here that takes ``dispatcher: Dispatch`` (and
``fake_openai`` to script the model), start the daemon with ``dispatcher.start(config)`` (extra
TOML: the dispatcher's own settings are added; ``personas=``: more persona files, or another
``fake``), post with :meth:`Dispatch.post`, read back with :meth:`Dispatch.replies` /
:meth:`Dispatch.wait_answered` (or every stored message of a channel: :meth:`Dispatch.stored`),
and use :meth:`Dispatch.crash` (SIGKILL the process that runs the turns, and for a daemon that
ran them itself, start another on the same store), :meth:`Dispatch.stop` (SIGTERM and its exit
status) and :meth:`Dispatch.restart`. Assert only what must hold for every dispatcher; what is one
dispatcher's own mechanics stays in its module (test_workers.py, test_cluster.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import agentd_cli
from tests.support import follow, wait_for
from tests.support.dispatch import SLOW_DELAY, SLOW_WORDS, Dispatch, assert_in_order_once, by_channel
from tests.support.fakeopenai import FakeOpenAI, Turn, fake_persona
from tests.support.mcptools import APPROVAL, WEATHER, tools_server
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


def test_a_bursts_later_message_is_answered_with_the_earlier_ones_reply_in_its_prompt(
    dispatcher: Dispatch, fake_openai: FakeOpenAI
) -> None:
    """Two messages in a row, the second stored while the first is still being answered: the second's
    turn runs after the first's reply is stored, and its prompt carries that reply where it belongs
    (after the first message), not a note that it was never answered."""
    dispatcher.start()
    fake_openai.queue(Turn(hang=True, text="the first answer"), Turn(text="the second answer"))
    first = dispatcher.post("burst", "what is the capital of France?")
    wait_for(lambda: fake_openai.hanging == 1, 60, "the first turn to wait on the model")
    second = dispatcher.post("burst", "and of Spain?")
    assert first.status_code == second.status_code == 202
    fake_openai.release()
    dispatcher.wait_answered([first.json()["id"], second.json()["id"]])
    prompt = fake_openai.chat_requests()[-1]["messages"]
    assert [(m["role"], m["content"]) for m in prompt if m["role"] != "system"] == [
        ("user", "what is the capital of France?"),
        ("assistant", "the first answer"),
        ("user", "and of Spain?"),
    ]


# -- rooms ------------------------------------------------------------------------------------------

#: A room of two personas: a person's message is answered by the personas it names (none: alpha), and
#: one persona's reply naming the other is a call that one answers (one such reply per person's message).
ROOM = '[channels.lounge]\npersonas = ["alpha", "beta"]\nanswer = "addressed"\nmax_persona_turns = 1\n'


def _prompts(fake: FakeOpenAI, persona: str) -> list[list[dict[str, Any]]]:
    """The messages of each request ``persona`` sent to the model, in order."""
    return [r["messages"] for r in fake.chat_requests() if f"You are {persona}," in r["messages"][0]["content"]]


def test_in_a_room_the_personas_its_rules_name_answer_once_each_and_hear_each_other_by_name(
    dispatcher: Dispatch, fake_openai: FakeOpenAI
) -> None:
    """alice's message names alpha: alpha alone answers it. alpha's reply calls on beta (``@beta``), and
    beta answers that call, once. beta's prompt carries alpha's words as alpha's (a user line with
    alpha's name in front: the message it answers), never as beta's own turn."""
    personas = {name: fake_persona(fake_openai.url, name, skills="[]") for name in ("alpha", "beta")}
    dispatcher.start(ROOM, personas=personas)
    call = "@beta, can you check the dates?"
    fake_openai.queue(Turn(text=call), Turn(text="The dates are right."))
    posted = dispatcher.post("lounge", "@alpha what do you think of the draft?", user="alice", persona=None)
    assert posted.status_code == 202, posted.text
    assert (posted.json()["persona"], posted.json()["triggered"]) == ("alpha", [])

    def settled() -> list[dict[str, Any]]:
        stored = dispatcher.stored("lounge")
        if any(m["status"] == "pending" for m in stored if m["role"] != "assistant"):
            return []
        return stored if sum(m["role"] == "assistant" for m in stored) >= 2 else []

    stored = wait_for(settled, 120, "alpha's reply and beta's answer to its call, nothing left to answer")
    replies = [m for m in stored if m["role"] == "assistant"]
    assert [(r["persona"], r["status"], r["content"]) for r in replies] == [
        ("alpha", "complete", call),
        ("beta", "complete", "The dates are right."),
    ]
    asked = {m["id"]: m for m in stored if m["role"] != "assistant"}
    assert [r["reply_to"] for r in replies] == list(asked)  # each message answered once, in order
    assert replies[0]["reply_to"] == int(posted.json()["id"])
    assert asked[replies[1]["reply_to"]]["author"] == "alpha"  # beta answered alpha's call, not alice
    assert [len(_prompts(fake_openai, p)) for p in ("alpha", "beta")] == [1, 1]
    (beta,) = _prompts(fake_openai, "beta")
    assert (beta[-1]["role"], beta[-1]["content"]) == ("user", f"alpha: {call}")
    assert not [m for m in beta if m["role"] == "assistant"]
    (alpha,) = _prompts(fake_openai, "alpha")
    assert alpha[-1] == {"role": "user", "content": "@alpha what do you think of the draft?"}


# -- schedules --------------------------------------------------------------------------------------


def _in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def _answered_once(dispatcher: Dispatch, schedule: dict[str, Any]) -> dict[str, Any] | None:
    """The schedule's one reply, once it fired and its one trigger message has one complete reply."""
    stored = dispatcher.stored(schedule["channel"])
    triggers = [m for m in stored if m["author"] == f"schedule:{schedule['id']}"]
    assert len(triggers) <= 1, triggers
    replies = [m for m in stored if triggers and m["reply_to"] == triggers[0]["id"] and m["role"] == "assistant"]
    assert len(replies) <= 1, replies
    return replies[0] if replies and replies[0]["status"] == "complete" else None


def _schedule(dispatcher: Dispatch, sid: int) -> dict[str, Any]:
    answer = httpx.get(f"{dispatcher.url}/v1/schedules/{sid}", timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_a_schedule_fires_once_and_is_answered_and_one_due_while_stopped_fires_once_after_restart(
    dispatcher: Dispatch, fake_openai: FakeOpenAI
) -> None:
    """Made over HTTP for a moment ahead: it fires once, and the persona answers its text once. Made
    (with the CLI, against the store) while the daemon is stopped, and due before it starts again:
    the next daemon fires it once, and answers it once."""
    dispatcher.start()
    body = {"persona": "fake", "channel": "dm-sched", "user": "ann", "text": "ping one", "at": _in(2)}
    made = httpx.post(f"{dispatcher.url}/v1/schedules", json=body, timeout=30)
    assert made.status_code == 201, made.text
    first = made.json()
    reply = wait_for(lambda: _answered_once(dispatcher, first), 120, "the schedule's firing to be answered")
    assert reply["content"] == "echo: ping one"
    fired = _schedule(dispatcher, first["id"])
    assert (fired["state"], fired["fired_count"]) == ("fired", 1)
    assert dispatcher.stop() == 0, "".join(dispatcher.daemons[-1].stderr)
    at = ["--channel", "dm-sched2", "--user", "ann", "--at", _in(1), "--json"]
    added = agentd_cli("schedule", "add", "fake", *at, "ping two", config=dispatcher.home)
    assert added.returncode == 0, added.stderr
    second = json.loads(added.stdout)
    due = datetime.fromisoformat(second["next_at"])
    wait_for(lambda: datetime.now(UTC) > due, 30, "the schedule made while stopped to be due")
    dispatcher.restart()
    reply = wait_for(lambda: _answered_once(dispatcher, second), 120, "the late firing to be answered")
    assert reply["content"] == "echo: ping two"
    assert [_schedule(dispatcher, s["id"])["fired_count"] for s in (first, second)] == [1, 1]
    asked = [r["messages"][-1]["content"] for r in fake_openai.chat_requests()]
    assert asked == ["ping one", "ping two"]  # each firing's turn asked the model once


# -- approvals --------------------------------------------------------------------------------------


def _approval_pending(dispatcher: Dispatch) -> dict[str, Any] | None:
    listed = httpx.get(f"{dispatcher.url}/v1/approvals", timeout=30)
    assert listed.status_code == 200, listed.text
    approvals = listed.json()["approvals"]
    assert len(approvals) <= 1, approvals
    return approvals[0] if approvals else None


def _decide(dispatcher: Dispatch, approval: dict[str, Any], decision: str, reason: str | None = None) -> None:
    body = {"decision": decision, "reason": reason}
    answer = httpx.post(f"{dispatcher.url}/v1/approvals/{approval['id']}", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == {"approve": "approved", "deny": "denied"}[decision]


def _tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def test_a_tool_call_needing_approval_holds_its_turn_until_approved_or_denied_over_http(
    dispatcher: Dispatch, fake_openai: FakeOpenAI
) -> None:
    """The model calls a tool whose calls an owner approves: the turn waits, unanswered, until the
    decision. Approved over HTTP, the tool runs and the turn goes on with its answer, answered once;
    denied, the tool never runs and the model is told why."""
    persona = fake_persona(fake_openai.url, channels='["dm-*"]', skills="[]")
    dispatcher.start(tools_server(), personas={"fake": persona + 'mcp_servers = ["tools"]\n' + APPROVAL})
    for channel, decision in (("dm-yes", "approve"), ("dm-no", "deny")):
        fake_openai.queue(Turn(tool_calls=[(WEATHER, {"city": "Oslo"})]))
        posted = dispatcher.post(channel, "What is the weather in Oslo?")
        assert posted.status_code == 202, posted.text
        message_id = int(posted.json()["id"])
        asked = wait_for(lambda: _approval_pending(dispatcher), 120, f"the call in {channel} to wait for approval")
        assert (asked["message_id"], asked["tool"], asked["arguments"]) == (message_id, WEATHER, {"city": "Oslo"})
        (held,) = [m for m in dispatcher.messages(channel) if m["id"] == message_id]
        assert held["status"] == "awaiting_approval"
        assert message_id not in dispatcher.replies()  # the turn waits: no reply before the decision
        requests = len(fake_openai.chat_requests())
        fake_openai.queue(Turn(text=f"{decision}d: done."))
        _decide(dispatcher, asked, decision, reason="not today" if decision == "deny" else None)
        (reply,) = dispatcher.wait_answered([message_id])[message_id]
        assert [m["content"] for m in dispatcher.stored(channel) if m["id"] == reply[0]] == [f"{decision}d: done."]
        resumed = fake_openai.chat_requests()[requests:]
        assert len(resumed) == 1, resumed  # the turn went on once, with the decision's outcome
        (told,) = _tool_messages(resumed[0])
        if decision == "approve":
            assert "The weather in Oslo is sunny" in told
        else:
            assert json.loads(told)["error"]["code"] == "approval_denied"
            assert "not today" in json.loads(told)["error"]["message"]
            assert "sunny" not in told
