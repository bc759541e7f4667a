"""``agentd budget`` through the entry point: empty, huge and unknown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd.config import load_config
from agentd.store import Store
from tests.conftest import agentd_cli


def test_budget_on_an_empty_channel_shows_every_section(home: Path) -> None:
    result = agentd_cli("budget", "buddy", "--channel", "general", config=home)
    assert result.returncode == 0, result.stderr
    for section in (
        "system prompt",
        "project",
        "memories",
        "history",
        "current message",
        "tool definitions",
        "output reserve",
        "free",
        "0 of 0 messages",
        "exhausted: no",
    ):
        assert section in result.stdout, section


@pytest.mark.slow
def test_budget_json_with_a_message_counts_the_recalled_memory(home: Path) -> None:
    agentd_cli("memory", "add", "User likes Python", "-p", "buddy", "--category", "preference", config=home)
    result = agentd_cli(
        "budget", "buddy", "-c", "general", "-m", "What programming language should I learn?", "--json", config=home
    )
    assert result.returncode == 0, result.stderr
    budget = json.loads(result.stdout)
    assert budget["memories_included"] == 1
    assert budget["memory_tokens"] > 0
    assert budget["current_tokens"] > 0
    assert budget["tools_tokens"] > 0
    assert budget["total_tokens"] + budget["output_reserve"] <= budget["window"]
    human = agentd_cli(
        "budget", "buddy", "-c", "general", "-m", "What programming language should I learn?", config=home
    )
    assert "User likes Python" in human.stdout
    assert "preference" in human.stdout


def test_budget_on_a_huge_channel_is_exhausted_and_shows_included_of_available(home: Path) -> None:
    cfg = load_config(home, environ={})
    store = Store.open(cfg.database_url)
    with store.write() as conn:
        for i in range(5000):
            store.messages.add(
                conn,
                channel="big",
                role="user" if i % 2 else "assistant",
                author="u",
                content=f"message {i} " + "lorem ipsum dolor sit amet " * 20,
                status="answered",
            )
    store.close()
    result = agentd_cli("budget", "buddy", "-c", "big", "--json", config=home)
    budget = json.loads(result.stdout)
    assert budget["history_available"] == 5000
    assert 0 < budget["history_messages"] < 5000
    assert budget["exhausted"] is True
    assert budget["messages_dropped"] == 5000 - budget["history_messages"]


def test_budget_for_an_unknown_persona_is_a_clear_error(home: Path) -> None:
    result = agentd_cli("budget", "nobody", "-c", "general", config=home)
    assert result.returncode == 2
    assert "unknown persona 'nobody'" in result.stderr
    assert "buddy" in result.stderr
    missing = agentd_cli("budget", "buddy", config=home)
    assert missing.returncode == 2
    assert "--channel" in missing.stderr


@pytest.mark.slow
def test_budget_and_memory_search_take_the_user_chat_takes(home: Path) -> None:
    """What ``agentd chat`` stored for its default user (``[user] name``, else the login name) is what
    ``budget`` and ``memory search`` count without --user; another --user does not see it."""
    env = {"AGENTD_USER__NAME": "alice"}
    said = agentd_cli("chat", "buddy", "-m", "remember that I like Python", config=home, env=env)
    assert said.returncode == 0, said.stderr
    shown = agentd_cli("budget", "buddy", "-c", "general", "-m", "what should I learn?", "--json", config=home, env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["memories_included"] == 1
    human = agentd_cli("budget", "buddy", "-c", "general", "-m", "what should I learn?", config=home, env=env)
    assert "buddy in #general for alice" in human.stdout
    assert "I like Python" in human.stdout
    bob = agentd_cli(
        "budget", "buddy", "-c", "general", "-m", "what should I learn?", "-u", "bob", "--json", config=home
    )
    assert json.loads(bob.stdout)["memories_included"] == 0
    found = agentd_cli("memory", "search", "what language do I like?", "-p", "buddy", "--json", config=home, env=env)
    assert [r["scope"] for r in json.loads(found.stdout)["results"]] == ["user:alice"]
