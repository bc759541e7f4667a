"""``agentd chat`` and ``agentd inspect`` through the entry point, on the offline model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import agentd_cli, agentd_process, write_home
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, embedding_config


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_interactive_chat_reads_lines_until_eof(home: Path) -> None:
    result = agentd_cli("chat", "buddy", "-u", "bob", config=home, input="hello there\nremember that I like tea\n")
    assert result.returncode == 0, result.stderr
    assert 'You said: "hello there"' in result.stdout
    assert "I will remember" in result.stdout
    listed = json.loads(agentd_cli("memory", "list", "-p", "buddy", "--user", "bob", "--json", config=home).stdout)
    assert listed[0]["text"] == "User said: I like tea"


@pytest.mark.slow
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


@pytest.mark.slow
def test_an_overlong_line_is_reported_and_the_interactive_session_goes_on(tmp_path: Path) -> None:
    """The limit is ``[runtime] max_message_chars``; a longer line is refused with the limit named,
    and the next line is answered; with -m the refusal is the command's error (exit 2)."""
    home = write_home(tmp_path, "[runtime]\nmax_message_chars = 40\n")
    result = agentd_cli("chat", "buddy", config=home, input="x" * 41 + "\nhello there\n")
    assert result.returncode == 0, result.stderr
    assert "message: is 41 characters; the limit is 40 ([runtime] max_message_chars)" in result.stderr
    assert 'You said: "hello there"' in result.stdout
    once = agentd_cli("chat", "buddy", "-m", "x" * 41, config=home)
    assert once.returncode == 2
    assert "the limit is 40" in once.stderr


@pytest.mark.slow
def test_global_options_come_before_or_after_the_command(home: Path, tmp_path: Path) -> None:
    """--config and --json work on either side of the command, also inside a group (memory)."""
    after = agentd_cli("chat", "buddy", "-m", "remember that I like tea", "-u", "bob", "--config", str(home))
    assert after.returncode == 0, after.stderr
    listed = agentd_cli("memory", "list", "-p", "buddy", "--json", "--config", str(home))
    assert [m["text"] for m in json.loads(listed.stdout)] == ["User said: I like tea"]
    before = agentd_cli("--json", "memory", "list", "-p", "buddy", config=home)
    assert json.loads(before.stdout) == json.loads(listed.stdout)
    personas = agentd_cli("personas", "--config", str(home), "--json")
    assert {p["name"] for p in json.loads(personas.stdout)} == {"buddy", "scholar"}
    missing = agentd_cli("personas", "--config", str(tmp_path / "nowhere.toml"))
    assert missing.returncode == 2
    assert "nowhere.toml: file not found" in missing.stderr


@pytest.mark.slow
def test_a_missing_model_key_is_one_line_at_once(tmp_path: Path) -> None:
    """Said before anything starts (no store, no model, no litellm import, no log line): one line."""
    claude = 'name = "claude"\nmodel = "anthropic/claude-sonnet-4-5"\nsystem_prompt = "hi"\n'
    home = write_home(tmp_path, personas={"claude": claude})
    result = agentd_process("chat", "claude", "-m", "hello", config=home, env={"ANTHROPIC_API_KEY": ""})
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        "error: model 'anthropic/claude-sonnet-4-5' needs ANTHROPIC_API_KEY, which is not set in the environment\n"
    )
    assert not (tmp_path / "agentd.db").exists()


@pytest.mark.slow
def test_a_one_message_chat_waits_for_its_episode_before_it_exits(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """Episodes are indexed in the background after the reply: ``chat -m`` gives that job its
    shutdown grace before the process ends, saying so, rather than cutting it (the exchange would be
    indexed only by the next start). The embedder takes two seconds per call here: the job runs
    on for well over the half second after which chat says it is saving (a margin for a busy machine)."""
    config = embedding_config(fake_openai) + "[memory]\nauto_retrieve = false\n"
    home = write_home(tmp_path, config)
    fake_openai.embedding_delay = 2.0
    env = {KEY_ENV: "test-key"}
    said = agentd_cli(
        "chat", "buddy", "-c", "general", "-u", "bob", "-m", "I keep the spare key under the mat", config=home, env=env
    )
    assert said.returncode == 0, said.stderr
    assert "saving what this conversation taught" in said.stderr
    listed = agentd_cli(
        "memory", "list", "-p", "buddy", "--episodes", "channel:general", "--json", config=home, env=env
    )
    assert [e["text"] for e in json.loads(listed.stdout)] == ["bob: I keep the spare key under the mat"]
