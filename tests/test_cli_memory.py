"""The CLI through its entry point: memory verbs, db, personas, doctor, errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import agentd_cli, newest_migration


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
        (["memory", "add", "x", "-p", "buddy", "--channel", "has space"], "scope.channel"),
        (["memory", "search", "x", "-p", "buddy", "--channel", "has space"], "--channel"),
    ]
    for args, message in cases:
        result = agentd_cli(*args, config=home)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
    listed = agentd_cli("memory", "list", "-p", "buddy", "--json", config=home)
    assert json.loads(listed.stdout) == []


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
    assert result.returncode == 0, result.stderr
    assert "added 2, already stored 0, skipped 2" in result.stdout
    assert "line 2: line: not valid JSON" in result.stderr
    assert "line 4: text: must not be empty" in result.stderr
    assert "importing" in result.stderr  # the progress bar
    as_json = agentd_cli("memory", "import", str(path), "-p", "buddy", "--json", config=home)
    assert json.loads(as_json.stdout)["duplicates"] == 2


def test_a_bad_config_fails_at_start_naming_file_and_key(tmp_path: Path) -> None:
    cfg = tmp_path / "agentd.toml"
    cfg.write_text("[memory]\ntop_k = 'x'\n")
    result = agentd_cli("memory", "list", "-p", "buddy", config=cfg)
    assert result.returncode == 2
    assert str(cfg) in result.stderr
    assert "memory.top_k" in result.stderr
    missing = agentd_cli("personas", config=tmp_path / "nope.toml")
    assert missing.returncode == 2
    assert "file not found" in missing.stderr


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
