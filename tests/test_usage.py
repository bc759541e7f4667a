"""``agentd usage`` and ``GET /v1/usage``: tokens and cost per persona and model, from the stored
context records, the delegations' subagent replies and the extraction calls included.

The fake OpenAI server's usage is known (11 prompt tokens per call, one completion token per word
of the scripted answer, at least one), so what the report must say follows from the script; cost
is litellm's cost map's price for those tokens (the boss persona's model is one the map prices,
served by the fake server), and 0 for a model it does not price.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentd.llm import litellm_module
from tests.conftest import agentd_cli
from tests.support import wait_for
from tests.support.fakeopenai import FakeOpenAI, Turn, fake_persona

PRICED = "openai/gpt-4o-mini"
CONFIG = """
[memory]
extract = "model"
extract_per_minute = 600
[episodes]
enabled = false
"""
NO_FACTS = Turn(text='{"memories": []}')  # two words: 11 prompt tokens, 2 completion tokens


def personas(fake: FakeOpenAI) -> dict[str, str]:
    boss = fake_persona(fake.url, "boss", '["delegate"]').replace('"openai/fake-model"', f'"{PRICED}"')
    return {"boss": boss, "helper": fake_persona(fake.url, "helper", "[]")}


def price(model: str, prompt: int, completion: int) -> float:
    p, c = litellm_module().cost_per_token(model=model, prompt_tokens=prompt, completion_tokens=completion)
    return float(p) + float(c)


@pytest.mark.both_backends
def test_usage_counts_replies_delegations_and_extraction_from_the_store(daemons: Any, fake_openai: FakeOpenAI) -> None:
    d = daemons(CONFIG, personas=personas(fake_openai))
    fake_openai.queue(
        Turn(tool_calls=[("delegate", {"persona": "helper", "task": "count the apples"})]),  # boss: 11 / 1
        Turn(text="there are four apples"),  # helper, as boss's subagent: 11 / 4
        Turn(text="helper says four"),  # boss again, with the tool result: 11 / 3
        NO_FACTS,  # extraction of the user's exchange with boss, in the background: 11 / 2
    )
    events = d.chat("how many apples?", persona="boss", channel="dm-alice", user="alice")
    assert events[-1].event == "done", events[-1]
    assert d.server.runtime.learning_idle(30)
    wait_for(lambda: not fake_openai.script, 30, "the extraction call")
    assert d.server.runtime.learning_idle(30)

    report = d.client.get("/v1/usage").json()
    rows = {(r["persona"], r["model"]): r for r in report["rows"]}
    assert set(rows) == {("boss", PRICED), ("helper", "openai/fake-model")}
    boss, helper = rows[("boss", PRICED)], rows[("helper", "openai/fake-model")]
    assert boss["by_kind"]["reply"] | {"cost_usd": 0} == {
        "calls": 1,  # one reply, its two model rounds summed in its record
        "prompt_tokens": 22,
        "completion_tokens": 4,
        "total_tokens": 26,
        "cost_usd": 0,
    }
    assert boss["by_kind"]["extraction"]["prompt_tokens"] == 11
    assert helper["by_kind"]["delegation"]["prompt_tokens"] == 11
    assert helper["by_kind"]["delegation"]["completion_tokens"] == 4
    assert set(helper["by_kind"]) == {"delegation"}
    assert (boss["prompt_tokens"], boss["completion_tokens"]) == (33, 6)
    assert boss["cost_usd"] == pytest.approx(price(PRICED, 22, 4) + price(PRICED, 11, 2), abs=1e-6)
    assert boss["cost_usd"] > 0
    assert helper["cost_usd"] == 0  # a model the cost map does not price
    assert report["total"]["calls"] == 3
    assert report["total"]["prompt_tokens"] == 44

    # The same from the command line, from the same store, grouped otherwise.
    by_model = json.loads(_cli(d, "usage", "--by", "model", "--json"))
    assert {r["model"]: r["total_tokens"] for r in by_model["rows"]} == {PRICED: 39, "openai/fake-model": 15}
    today = datetime.now(UTC).date().isoformat()
    by_day = json.loads(_cli(d, "usage", "--by", "day", "--json", "--persona", "helper"))
    assert [(r["day"], r["calls"]) for r in by_day["rows"]] == [(today, 1)]
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert json.loads(_cli(d, "usage", "--json", "--since", tomorrow))["rows"] == []
    table = _cli(d, "usage")
    assert "boss" in table
    assert PRICED in table
    assert "helper" in table


def _cli(d: Any, *args: str) -> str:
    done = agentd_cli(*args, config=d.home)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_usage_refuses_a_bad_since_naming_the_field(daemons: Any) -> None:
    d = daemons()
    answer = d.client.get("/v1/usage", params={"since": "last tuesday"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "since"
    done = agentd_cli("usage", "--since", "last tuesday", config=d.home)
    assert done.returncode == 2
    assert "since" in done.stderr
    assert "YYYY-MM-DD" in done.stderr
