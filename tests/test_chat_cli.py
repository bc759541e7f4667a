"""``agentd chat`` and ``agentd inspect`` through the entry point, on the offline model."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import agentd_cli


def test_chat_json_streams_events_with_memory_context_first_and_inspect_shows_them(home: Path) -> None:
    agentd_cli("memory", "add", "User likes Python", "-p", "buddy", "--category", "preference", config=home)
    result = agentd_cli("chat", "buddy", "-m", "What programming language should I learn?", "--json", config=home)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[0]["type"] == "memory_context"
    assert events[0]["memories"][0]["text"] == "User likes Python"
    assert events[-1]["type"] == "done"
    text = "".join(e["text"] for e in events if e["type"] == "token_delta")
    assert "User likes Python" in text

    inspected = agentd_cli("inspect", str(events[-1]["message_id"]), "--json", config=home)
    assert inspected.returncode == 0, inspected.stderr
    record = json.loads(inspected.stdout)
    assert record["memories"][0]["text"] == "User likes Python"
    assert record["model"] == "offline"
    assert record["message"] == "What programming language should I learn?"
    assert record["budget"]["memories_included"] == 1
    assert record["usage"]["total_tokens"] > 0
    human = agentd_cli("inspect", str(events[-1]["message_id"]), config=home)
    assert "User likes Python" in human.stdout
    assert "memories" in human.stdout


def test_chat_shows_recalled_memories_before_the_reply_and_no_memory_turns_it_off(home: Path) -> None:
    agentd_cli("memory", "add", "User likes Python", "-p", "buddy", config=home)
    shown = agentd_cli(
        "chat", "buddy", "-c", "general", "-u", "alice", "-m", "What programming language should I learn?", config=home
    )
    assert shown.returncode == 0, shown.stderr
    assert "recalled 1 memory" in shown.stderr
    assert "User likes Python" in shown.stderr
    assert shown.stdout.startswith('You said: "What programming language should I learn?"')
    off = agentd_cli(
        "chat", "buddy", "-m", "What programming language should I learn?", "--no-memory", "--json", config=home
    )
    first = json.loads(off.stdout.splitlines()[0])
    assert first == {
        "type": "memory_context",
        "memories": [],
        "status": "disabled",
        "user_message_id": first["user_message_id"],
        "near_misses": [],
        "episodes": [],
    }


def test_interactive_chat_reads_lines_until_eof(home: Path) -> None:
    result = agentd_cli("chat", "buddy", "-u", "bob", config=home, input="hello there\nremember that I like tea\n")
    assert result.returncode == 0, result.stderr
    assert 'You said: "hello there"' in result.stdout
    assert "I will remember" in result.stdout
    listed = json.loads(agentd_cli("memory", "list", "-p", "buddy", "--user", "bob", "--json", config=home).stdout)
    assert listed[0]["text"] == "User said: I like tea"


def test_chat_and_inspect_errors(home: Path) -> None:
    unknown = agentd_cli("chat", "nobody", "-m", "hi", config=home)
    assert unknown.returncode == 2
    assert "unknown persona 'nobody'" in unknown.stderr
    empty = agentd_cli("chat", "buddy", "-m", "   ", config=home)
    assert empty.returncode == 2
    assert "message: must not be empty" in empty.stderr
    missing = agentd_cli("inspect", "999", config=home)
    assert missing.returncode == 2
    assert "unknown reply 999" in missing.stderr
