"""The CLI through its entry point: memory verbs, db, personas, doctor, errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import agentd_cli, agentd_process, newest_migration


def test_help_and_version() -> None:
    result = agentd_cli("--help")
    assert result.returncode == 0
    for verb in ("memory", "db", "doctor", "personas"):
        assert verb in result.stdout
    version = agentd_cli("--version")
    assert version.returncode == 0
    assert "agentd, version" in version.stdout
    sub = agentd_cli("memory", "import", "--help")
    assert "JSONL" in sub.stdout
    assert "line numbers" in sub.stdout


@pytest.mark.slow
def test_add_search_list_forget_roundtrip(home: Path) -> None:
    add = agentd_cli(
        "memory",
        "add",
        "User likes Python",
        "-p",
        "buddy",
        "--category",
        "preference",
        "--metadata",
        '{"source": "test"}',
        "--json",
        config=home,
    )
    assert add.returncode == 0, add.stderr
    mem = json.loads(add.stdout)
    assert mem["created"] is True
    assert mem["scope"] == "global"
    agentd_cli("memory", "add", "User's dog is named Max", "-p", "buddy", "--user", "alice", config=home)

    found = agentd_cli(
        "memory", "search", "What programming language should I learn?", "-p", "buddy", "--json", config=home
    )
    assert found.returncode == 0, found.stderr
    payload = json.loads(found.stdout)
    assert payload["total_found"] == 1
    (result,) = payload["results"]
    assert result["text"] == "User likes Python"
    assert result["id"] == mem["id"]
    assert result["metadata"] == {"source": "test"}
    assert set(result) >= {"text", "category", "score", "created_at"}

    none = agentd_cli("memory", "search", "Explain quantum entanglement", "-p", "buddy", "--json", config=home)
    assert json.loads(none.stdout) == {"results": [], "total_found": 0}

    listed = json.loads(agentd_cli("memory", "list", "-p", "buddy", "--json", config=home).stdout)
    assert [m["text"] for m in listed] == ["User's dog is named Max", "User likes Python"]
    only_user = json.loads(agentd_cli("memory", "list", "-p", "buddy", "--user", "alice", "--json", config=home).stdout)
    assert [m["scope"] for m in only_user] == ["user:alice"]

    gone = agentd_cli("memory", "forget", str(mem["id"]), "--json", config=home)
    assert gone.returncode == 0
    assert json.loads(gone.stdout)["forgotten"]["id"] == mem["id"]
    again = agentd_cli("memory", "forget", str(mem["id"]), config=home)
    assert again.returncode == 2
    assert "unknown memory" in again.stderr


def test_bad_input_exits_2_with_a_clear_line_and_changes_nothing(home: Path) -> None:
    cases = [
        (["memory", "add", "   ", "-p", "buddy"], "text: must not be empty"),
        (["memory", "add", "x", "-p", "nobody"], "unknown persona 'nobody'"),
        (["memory", "add", "x", "-p", "buddy", "--metadata", "{bad"], "--metadata: not valid JSON"),
        (["memory", "add", "x", "-p", "buddy", "--metadata", "[1]"], "--metadata: must be a JSON object"),
        (["memory", "add", "x", "-p", "buddy", "--user", "u", "--global"], "only one of"),
        (["memory", "add", "x", "-p", "buddy", "--channel", "has space"], "--channel"),
        (["memory", "search", "x", "-p", "buddy", "--channel", "has space"], "--channel"),
    ]
    for args, message in cases:
        result = agentd_cli(*args, config=home)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
    listed = agentd_cli("memory", "list", "-p", "buddy", "--json", config=home)
    assert json.loads(listed.stdout) == []


@pytest.mark.slow
def test_import_shows_progress_and_reports_skipped_lines(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"text": "User likes Python"}),
                "{oops",
                json.dumps({"text": "Team uses SQLite", "scope": "channel:eng"}),
                json.dumps({"text": ""}),
            ]
        )
    )
    result = agentd_cli("memory", "import", str(path), "-p", "buddy", config=home)
    assert result.returncode == 2, result.stderr  # something was skipped
    assert "added 2, already stored 0, skipped 2" in result.stdout
    assert f"{path}:2: line: not valid JSON" in result.stderr
    assert f"{path}:4: text: must not be empty" in result.stderr
    assert "importing" in result.stderr  # the progress bar
    as_json = agentd_cli("memory", "import", str(path), "-p", "buddy", "--json", config=home)
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["duplicates"] == 2


@pytest.mark.slow
def test_import_skips_a_line_of_bad_utf8_accepts_a_bom_and_strict_imports_all_or_nothing(
    home: Path, tmp_path: Path
) -> None:
    """One byte that is not UTF-8 costs its line only; a byte order mark is not part of line 1;
    --strict imports nothing when a line is bad, everything when none is (exit 0)."""
    path = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": "User keeps bees"}).encode(), b'{"text": "Caf\xe9 owner"}', b"", b"{oops"]
    lines.append(json.dumps({"text": "User likes jazz"}).encode())
    path.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\r\n")

    strict = agentd_cli("memory", "import", str(path), "-p", "buddy", "--strict", config=home)
    assert strict.returncode == 2
    assert "imported nothing" in strict.stdout
    assert f"{path}:2: line: not UTF-8: byte 0xe9 at column 14" in strict.stderr
    assert f"{path}:4: line: not valid JSON" in strict.stderr
    listed = agentd_cli("memory", "list", "-p", "buddy", "--json", config=home)
    assert json.loads(listed.stdout) == []

    result = agentd_cli("memory", "import", str(path), "-p", "buddy", "--json", config=home)
    assert result.returncode == 2, result.stderr
    report = json.loads(result.stdout)
    assert (report["added"], [s["line"] for s in report["skipped"]], report["refused"]) == (2, [2, 4], False)
    texts = {m["text"] for m in json.loads(agentd_cli("memory", "list", "-p", "buddy", "--json", config=home).stdout)}
    assert texts == {"User keeps bees", "User likes jazz"}

    good = tmp_path / "good.jsonl"
    good.write_bytes(b"\xef\xbb\xbf" + json.dumps({"text": "User sings"}).encode() + b"\n")
    clean = agentd_cli("memory", "import", str(good), "-p", "buddy", "--strict", config=home)
    assert clean.returncode == 0, clean.stderr
    assert f"imported {good}: added 1, already stored 0, skipped 0" in clean.stdout


def test_a_bad_config_fails_at_start_naming_file_and_key(tmp_path: Path) -> None:
    cfg = tmp_path / "agentd.toml"
    cfg.write_text("[memory]\nmax_per_reply = 'x'\n")
    result = agentd_cli("memory", "list", "-p", "buddy", config=cfg)
    assert result.returncode == 2
    assert str(cfg) in result.stderr
    assert "memory.max_per_reply" in result.stderr
    missing = agentd_cli("personas", config=tmp_path / "nope.toml")
    assert missing.returncode == 2
    assert "file not found" in missing.stderr


@pytest.mark.slow
def test_db_upgrade_personas_and_doctor(home: Path) -> None:
    up = agentd_cli("db", "upgrade", "--json", config=home)
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["to"] == newest_migration()
    again = agentd_cli("db", "upgrade", config=home)
    assert "newest revision" in again.stdout

    personas = json.loads(agentd_cli("personas", "--json", config=home).stdout)
    by_name = {p["name"]: p for p in personas}
    assert set(by_name) == {"buddy", "scholar"}
    assert by_name["buddy"]["model"] == "offline"
    assert by_name["buddy"]["context_window"] > 0

    doctor = agentd_cli("doctor", "--json", config=home)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    checks = {c["check"]: c for c in json.loads(doctor.stdout)}
    assert all(c["ok"] for c in checks.values())
    assert "sqlite-vec v0.1.9" in checks["sqlite-vec"]["detail"]
    assert "384-d" in checks["embedder"]["detail"]


@pytest.mark.slow
def test_doctor_names_missing_llm_credentials(tmp_path: Path) -> None:
    from tests.conftest import write_home

    home = write_home(
        tmp_path,
        personas={"real": 'name = "real"\nmodel = "anthropic/claude-sonnet-4-5"\nsystem_prompt = "hi"\n'},
    )
    result = agentd_cli("doctor", "--json", config=home)
    assert result.returncode == 1
    checks = {c["check"]: c for c in json.loads(result.stdout)}
    assert checks["llm real"]["ok"] is False
    assert "ANTHROPIC_API_KEY" in checks["llm real"]["detail"]


@pytest.mark.slow
def test_memory_search_returns_memories_and_episodes_only_with_episodes(home: Path) -> None:
    """The exchanges a chat indexed as episodes are not memories: a search finds them only with
    --episodes (those of --channel, and of the user's direct channels)."""
    for text in ("remember that I like Python", "I am learning the Python language this winter"):
        assert agentd_cli("chat", "buddy", "-c", "general", "-u", "bob", "-m", text, config=home).returncode == 0
    episodes = agentd_cli("memory", "list", "-p", "buddy", "--episodes", "channel:general", "--json", config=home)
    assert json.loads(episodes.stdout), "the chat indexed no episode"
    args = ("memory", "search", "which language am I learning?", "-p", "buddy", "-u", "bob", "--min-score", "0")
    plain = json.loads(agentd_cli(*args, "--json", config=home).stdout)["results"]
    assert plain
    assert all(not r["scope"].startswith("episodes:") for r in plain)
    both = json.loads(agentd_cli(*args, "-c", "general", "--episodes", "--json", config=home).stdout)["results"]
    assert any(r["scope"] == "episodes:channel:general" for r in both)


@pytest.mark.slow
def test_doctor_fails_where_serve_would_with_the_same_message(tmp_path: Path) -> None:
    """One loader: a channel bound to a persona there is none of stops `agentd serve`, and doctor,
    which checks the configuration by the same code, fails on it with the same words."""
    from tests.conftest import write_home

    home = write_home(tmp_path, '[daemon]\nport = 0\n[channels.general]\npersonas = ["chef"]\n')
    served = agentd_process("serve", config=home)  # its own process: serve sets up process-wide state
    assert served.returncode != 0
    assert "unknown persona 'chef'" in served.stderr
    result = agentd_cli("doctor", "--json", config=home)
    assert result.returncode == 1
    checks = {c["check"]: c for c in json.loads(result.stdout)}
    assert checks["config"]["ok"] is False
    assert checks["config"]["detail"] in served.stderr
    assert "channels.general.personas" in checks["config"]["detail"]


@pytest.mark.slow
def test_doctor_warns_of_a_model_litellm_does_not_know(tmp_path: Path) -> None:
    from tests.conftest import write_home

    persona = 'name = "odd"\nmodel = "anthropic/claude-nonexistent-9"\nsystem_prompt = "hi"\n'
    home = write_home(tmp_path, personas={"odd": persona})
    result = agentd_cli("doctor", "--json", config=home, env={"ANTHROPIC_API_KEY": "sk-test"})
    checks = {c["check"]: c for c in json.loads(result.stdout)}
    assert result.returncode == 0, result.stdout
    assert checks["model odd"]["ok"] is True
    assert checks["model odd"]["warning"] is True
    assert "'anthropic/claude-nonexistent-9'" in checks["model odd"]["detail"]
    human = agentd_cli("doctor", config=home, env={"ANTHROPIC_API_KEY": "sk-test"})
    assert "warn" in human.stdout
