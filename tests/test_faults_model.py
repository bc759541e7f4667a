"""Faults of the chat model, through the real daemon over HTTP: what is stored, what is sent.

A reply is stored ``complete`` only when the model said it had finished;
transient failures before the first token are tried again (``Retry-After``
honoured), never after text has streamed; each failure has its own code and
is logged at warning with the persona, model and api_base.
"""

from __future__ import annotations

import socket

import pytest

from tests.support import READS_THE_TURNS_LOG, SSE
from tests.support.fakeopenai import Turn, fake_persona

RETRIES = "[models]\nretries = 2\nretry_backoff_seconds = 0.05\nretry_max_wait_seconds = 5\n"


def outcome(d, events: list[SSE]) -> tuple[dict, list[dict]]:
    """The stored user message of the turn and the replies to it."""
    user_id = events[0].data["user_message_id"]
    stored = d.messages("general")
    user = next(m for m in stored if m["id"] == user_id)
    return user, [m for m in stored if m["reply_to"] == user_id]


@pytest.mark.local_actors(READS_THE_TURNS_LOG)
def test_a_stream_cut_before_the_model_finished_is_stored_interrupted(daemons, fake_openai, capfd) -> None:
    d = daemons('[embedding]\nprovider = "none"\n')
    fake_openai.queue(Turn(text="a partial answer that goes on and on", close_after=3))
    events = d.chat("tell me something")
    names = [e.event for e in events]
    assert names[0] == "memory_context"
    assert names[-1] == "error"
    assert "done" not in names
    error = events[-1].data
    assert error["code"] == "llm_truncated"
    streamed = "".join(e.data["text"] for e in events if e.event == "token_delta")
    assert streamed == "a partial answer "
    user, replies = outcome(d, events)
    assert user["status"] == "failed"
    assert [(r["status"], r["content"]) for r in replies] == [("interrupted", streamed)]
    assert error["message_id"] == replies[0]["id"]
    assert len(fake_openai.chat_requests()) == 1  # text had streamed: never tried again
    logged = capfd.readouterr().err
    assert "model_failed" in logged
    assert "llm_truncated" in logged
    assert "persona=fake" in logged
    assert "model=openai/fake-model" in logged
    assert fake_openai.url in logged


def test_a_body_that_is_not_a_completion_is_an_error_and_nothing_is_stored_complete(daemons, fake_openai) -> None:
    d = daemons('[embedding]\nprovider = "none"\n')
    for body in (b"this is not json", b"data: {not json\n\n", b'{"choices": "nope"}'):
        fake_openai.queue(Turn(body=body))
        events = d.chat("hello")
        assert events[-1].event == "error", (body, events)
        assert events[-1].data["code"] == "llm_malformed", (body, events[-1].data)
        user, replies = outcome(d, events)
        assert user["status"] == "failed"
        assert replies == []


@pytest.mark.local_actors(READS_THE_TURNS_LOG)
def test_a_refused_connection_is_llm_unreachable_and_tried_again(daemons, fake_openai, capfd) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    d = daemons(
        '[embedding]\nprovider = "none"\n' + RETRIES,
        personas={"fake": fake_persona(f"http://127.0.0.1:{port}/v1")},
    )
    events = d.chat("anyone there?")
    assert events[-1].event == "error"
    assert events[-1].data["code"] == "llm_unreachable"
    user, replies = outcome(d, events)
    assert user["status"] == "failed"
    assert replies == []
    logged = capfd.readouterr().err
    assert logged.count("model_retry") == 2
    assert "model_failed" in logged
    assert "warning" in logged
    assert f"127.0.0.1:{port}" in logged


@pytest.mark.local_actors(READS_THE_TURNS_LOG)
def test_transient_failures_before_the_first_token_are_retried_honouring_retry_after(
    daemons, fake_openai, capfd
) -> None:
    d = daemons('[embedding]\nprovider = "none"\n' + RETRIES)
    fake_openai.queue(
        Turn(status=429, headers={"Retry-After": "1"}),
        Turn(reset=True),
        Turn(text="third time lucky"),
    )
    events = d.chat("hello")
    # Retry-After was what the turn waited before its second try (the first wait the log names).
    retries = [line for line in capfd.readouterr().err.splitlines() if "model_retry" in line]
    assert len(retries) == 2, retries
    assert "wait_s=1.0" in retries[0], retries
    assert events[-1].event == "done"
    assert events[-1].data["text"] == "third time lucky"
    assert len(fake_openai.chat_requests()) == 3
    user, replies = outcome(d, events)
    assert user["status"] == "answered"
    assert [r["status"] for r in replies] == ["complete"]
    # After the last try the turn fails with the last error.
    fake_openai.queue(Turn(status=503), Turn(status=503), Turn(status=500))
    events = d.chat("again")
    assert events[-1].event == "error"
    assert events[-1].data["code"] == "llm_http_error"
    assert len(fake_openai.chat_requests()) == 6
    # A Retry-After longer than retry_max_wait_seconds is not waited for: the turn fails at once.
    fake_openai.queue(Turn(status=429, headers={"Retry-After": "120"}))
    events = d.chat("and again")
    assert events[-1].data["code"] == "llm_rate_limited"  # not waited for: one request, no retry
    assert len(fake_openai.chat_requests()) == 7


def test_a_failure_that_is_not_transient_is_not_retried(daemons, fake_openai) -> None:
    d = daemons('[embedding]\nprovider = "none"\n' + RETRIES)
    fake_openai.queue(Turn(status=400))
    events = d.chat("hello")
    assert events[-1].data["code"] == "llm_bad_request"
    assert len(fake_openai.chat_requests()) == 1


def test_the_offline_model_is_never_retried_and_finishes(daemons) -> None:
    offline = 'name = "fake"\nmodel = "offline"\nmax_reply_tokens = 256\nsystem_prompt = "You are fake."\n'
    d = daemons('[embedding]\nprovider = "none"\n' + RETRIES, personas={"fake": offline})
    events = d.chat("hello")
    assert events[-1].event == "done"
    user, replies = outcome(d, events)
    assert user["status"] == "answered"
    assert [r["status"] for r in replies] == ["complete"]
