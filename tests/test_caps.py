"""Spend caps: a persona's ``max_tokens_per_day`` and ``max_cost_usd_per_day``, ``[users]
max_tokens_per_day`` across personas, per UTC day.

The fake OpenAI server's usage is known (11 prompt tokens per call, one completion token per word
of the scripted answer), and it counts the requests it gets: a refused turn must add none. Each
client sees the refusal in its own shape: the ``error`` event of ``POST /v1/chat``, HTTP 429 with
``Retry-After`` on the OpenAI route, the CLI's error line. The next day is tested by storing usage
dated yesterday, not by waiting for midnight.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from agentd.spend.caps import SpendCaps, day_of
from agentd.store.spend import Spent
from tests.conftest import agentd_cli
from tests.support import COUNTS_TURNS_ON_METRICS, wait_for
from tests.support.fakeopenai import FakeOpenAI, Turn, fake_persona

TEN_WORDS = Turn(text="one two three four five six seven eight nine ten")  # 11 + 10 = 21 tokens
PRICED = "openai/gpt-4o-mini"


def capped(fake: FakeOpenAI, name: str, caps: str, model: str = "openai/fake-model") -> str:
    """A fake-model persona file with ``caps`` (TOML lines) added."""
    return fake_persona(fake.url, name, "[]").replace('"openai/fake-model"', f'"{model}"') + caps


def tomorrow_midnight() -> datetime:
    today = datetime.now(UTC).date()
    return datetime.combine(today + timedelta(days=1), datetime.min.time(), UTC)


def refusals(metrics_text: str, persona: str, cap: str) -> float:
    labels = rf'(?=[^}}]*cap="{re.escape(cap)}")(?=[^}}]*persona="{persona}")'
    pattern = rf"^agentd_budget_refusals_total{{{labels}[^}}]*}} (\S+)$"
    found = re.search(pattern, metrics_text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.both_backends
@pytest.mark.local_actors(COUNTS_TURNS_ON_METRICS)
def test_a_persona_past_its_token_cap_is_refused_with_no_model_call(daemons: Any, fake_openai: FakeOpenAI) -> None:
    d = daemons(personas={"capped": capped(fake_openai, "capped", "max_tokens_per_day = 20\n")})
    counted = refusals(d.client.get("/metrics").text, "capped", "max_tokens_per_day")  # metrics are per process
    fake_openai.queue(TEN_WORDS)
    first = d.chat("hello", persona="capped", channel="dm-alice", user="alice")
    assert first[-1].event == "done", first[-1]
    assert len(fake_openai.chat_requests()) == 1

    # 21 tokens of 20: the next turn is not sent to the model, over POST /v1/chat ...
    refused = d.chat("and again", persona="capped", channel="dm-alice", user="alice")
    assert [e.event for e in refused] == ["memory_context", "error"], refused
    error = refused[-1].data
    assert error["code"] == "budget_exceeded"
    assert error["cap"] == "persona:capped:max_tokens_per_day"
    assert error["resets_at"] == tomorrow_midnight().isoformat().replace("+00:00", "Z")
    assert "max_tokens_per_day" in error["message"]
    assert "21 tokens of 20" in error["message"]
    assert len(fake_openai.chat_requests()) == 1
    stored = d.messages("dm-alice")
    assert stored[-1]["content"] == "and again"
    assert stored[-1]["status"] == "failed"

    # ... on the OpenAI route: 429 with Retry-After at the reset, streamed or not, nothing stored ...
    for stream in (False, True):
        before = datetime.now(UTC)
        answer = d.client.post(
            "/v1/chat/completions",
            json={
                "model": "capped",
                "messages": [{"role": "user", "content": "hi"}],
                "user": "alice",
                "stream": stream,
            },
        )
        assert answer.status_code == 429, answer.text
        assert answer.json()["error"]["code"] == "budget_exceeded"
        assert answer.json()["error"]["type"] == "rate_limit_error"
        wait = int(answer.headers["Retry-After"])
        # Whole seconds, rounded up, to the reset as the daemon saw it between these two readings.
        assert (tomorrow_midnight() - datetime.now(UTC)).total_seconds() - 1 <= wait
        assert wait <= (tomorrow_midnight() - before).total_seconds() + 1
    assert len(d.messages("dm-alice")) == len(stored)
    assert len(fake_openai.chat_requests()) == 1
    # One turn and two OpenAI requests refused (those before a turn: nothing stored).
    assert refusals(d.client.get("/metrics").text, "capped", "max_tokens_per_day") == counted + 3

    # ... and by the CLI.
    printed = agentd_cli("chat", "capped", "-m", "hi", "-u", "alice", config=d.home)
    assert printed.returncode != 0
    assert "error (budget_exceeded):" in printed.stderr, printed.stderr
    assert "persona 'capped' reached its max_tokens_per_day cap" in printed.stderr
    assert len(fake_openai.chat_requests()) == 1

    shown = json.loads(agentd_cli("usage", "--json", config=d.home).stdout)
    assert shown["caps"] == [
        {
            "kind": "persona",
            "name": "capped",
            "cap": "max_tokens_per_day",
            "limit": 20,
            "used": 21,
            "left": 0,
            "resets_at": tomorrow_midnight().isoformat(),
        }
    ]
    assert d.client.get("/v1/usage").json()["caps"] == shown["caps"]
    table = agentd_cli("usage", config=d.home).stdout
    assert "spend caps" in table
    assert "persona capped" in table


def test_mcp_chat_past_a_cap_is_a_tool_error_naming_it(daemons: Any, fake_openai: FakeOpenAI) -> None:
    d = daemons(personas={"capped": capped(fake_openai, "capped", "max_tokens_per_day = 20\n")})
    fake_openai.queue(TEN_WORDS)
    assert d.chat("hello", persona="capped", channel="dm-alice", user="alice")[-1].event == "done"
    found: list[types.CallToolResult] = []

    async def main() -> None:
        headers = {"X-Agentd-Persona": "capped", "X-Agentd-User": "alice"}
        transport = streamable_http_client(f"{d.url}/mcp", http_client=create_mcp_http_client(headers=headers))
        with anyio.fail_after(120):
            async with Client(transport) as client:
                found.append(await client.call_tool("chat", {"message": "again", "channel": "dm-alice"}))

    anyio.run(main)
    assert found[0].is_error
    error = (found[0].structured_content or {})["error"]
    assert error["code"] == "budget_exceeded"
    assert error["cap"] == "persona:capped:max_tokens_per_day"
    assert error["resets_at"] == tomorrow_midnight().isoformat().replace("+00:00", "Z")
    assert len(fake_openai.chat_requests()) == 1


@pytest.mark.local_actors(COUNTS_TURNS_ON_METRICS)
def test_a_user_cap_counts_every_persona_and_spares_other_users(daemons: Any, fake_openai: FakeOpenAI) -> None:
    personas = {"one": capped(fake_openai, "one", ""), "two": capped(fake_openai, "two", "")}
    d = daemons("[users]\nmax_tokens_per_day = 30\n", personas=personas)
    counted = refusals(d.client.get("/metrics").text, "one", "users.max_tokens_per_day")
    fake_openai.queue(TEN_WORDS, TEN_WORDS, TEN_WORDS)
    assert d.chat("hi", persona="one", channel="dm-alice-one", user="alice")[-1].event == "done"  # 21
    assert d.chat("hi", persona="two", channel="dm-alice-two", user="alice")[-1].event == "done"  # 42
    refused = d.chat("hi again", persona="one", channel="dm-alice-one", user="alice")
    assert refused[-1].data["code"] == "budget_exceeded", refused[-1]
    assert refused[-1].data["cap"] == "user:alice:max_tokens_per_day"
    assert "user 'alice' reached its max_tokens_per_day cap (42 tokens of 30 today)" in refused[-1].data["message"]
    assert len(fake_openai.chat_requests()) == 2
    # bob has spent nothing: he is answered by the same persona.
    assert d.chat("hi", persona="one", channel="dm-bob", user="bob")[-1].event == "done"
    assert len(fake_openai.chat_requests()) == 3
    caps = {(c["name"], c["cap"]): c for c in d.client.get("/v1/usage").json()["caps"]}
    assert caps[("alice", "max_tokens_per_day")]["left"] == 0
    assert caps[("bob", "max_tokens_per_day")]["used"] == 21
    assert caps[("bob", "max_tokens_per_day")]["left"] == 9
    assert refusals(d.client.get("/metrics").text, "one", "users.max_tokens_per_day") == counted + 1


def test_the_caps_reset_at_the_next_utc_day(daemons: Any, fake_openai: FakeOpenAI) -> None:
    d = daemons(personas={"capped": capped(fake_openai, "capped", "max_tokens_per_day = 20\n")})
    store = d.app.store
    yesterday = day_of(datetime.now(UTC) - timedelta(days=1))
    with store.write() as conn:
        store.spend.add(conn, [Spent(yesterday, "capped", "alice", "openai/fake-model", 10_000, 10_000)])
    fake_openai.queue(TEN_WORDS)
    assert d.chat("hello", persona="capped", user="alice")[-1].event == "done"  # yesterday's spend is not today's
    caps = SpendCaps(d.app.config, store, d.app.personas)
    persona = d.app.personas["capped"]
    with pytest.raises(Exception, match="max_tokens_per_day") as raised:
        caps.check(persona, "alice")
    assert raised.value.resets_at == tomorrow_midnight().isoformat().replace("+00:00", "Z")  # type: ignore[attr-defined]
    caps.check(persona, "alice", now=tomorrow_midnight())  # a new day: nothing spent yet
    assert [c.used for c in caps.today(now=tomorrow_midnight())] == [0]

    # Forgetting alice removes her name from the spend, not the persona's spend.
    store.forget_user("alice")
    with store.read() as conn:
        rows = store.spend.of_day(conn, day_of(datetime.now(UTC)))
    assert [(r.user, r.prompt_tokens + r.completion_tokens) for r in rows] == [("", 21)]
    with pytest.raises(Exception, match="max_tokens_per_day"):
        caps.check(persona, "bob")


def test_a_cost_cap_prices_the_day_and_unpriced_tokens_still_count(daemons: Any, fake_openai: FakeOpenAI) -> None:
    personas = {
        "priced": capped(fake_openai, "priced", "max_cost_usd_per_day = 0.000001\n", PRICED),
        "free": capped(fake_openai, "free", "max_cost_usd_per_day = 0.000001\nmax_tokens_per_day = 20\n"),
    }
    d = daemons(personas=personas)
    fake_openai.queue(TEN_WORDS, TEN_WORDS)
    assert d.chat("hi", persona="priced", channel="p")[-1].event == "done"
    refused = d.chat("hi", persona="priced", channel="p")[-1].data
    assert refused["code"] == "budget_exceeded"
    assert refused["cap"] == "persona:priced:max_cost_usd_per_day"
    # An unpriced model costs 0, so its cost cap never stops it; its tokens still count.
    assert d.chat("hi", persona="free", channel="f")[-1].event == "done"
    assert d.chat("hi", persona="free", channel="f")[-1].data["cap"] == "persona:free:max_tokens_per_day"
    assert len(fake_openai.chat_requests()) == 2


def test_extraction_counts_toward_and_respects_the_caps(daemons: Any, fake_openai: FakeOpenAI) -> None:
    config = '[memory]\nextract = "model"\nextract_per_minute = 600\n[episodes]\nenabled = false\n'
    d = daemons(config, personas={"capped": capped(fake_openai, "capped", "max_tokens_per_day = 40\n")})
    no_facts = Turn(text='{"memories": []}')  # 11 + 2 = 13 tokens
    fake_openai.queue(TEN_WORDS, no_facts, TEN_WORDS, no_facts)
    assert d.chat("I like tea", persona="capped", user="alice")[-1].event == "done"  # 21
    wait_for(lambda: len(fake_openai.chat_requests()) == 2, 30, "the extraction call")
    assert d.server.runtime.learning_idle(30)  # 21 + 13 = 34: under 40
    assert d.chat("I like coffee", persona="capped", user="alice")[-1].event == "done"  # 55
    assert d.server.runtime.learning_idle(30)
    assert len(fake_openai.chat_requests()) == 3  # the second extraction was not asked for
    caps = d.client.get("/v1/usage").json()["caps"]
    assert [(c["used"], c["left"]) for c in caps] == [(55, 0)]
