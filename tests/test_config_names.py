"""Renamed and moved config keys: each old name is still read, as the new one, with a warning
naming the file, the old key and the new one; both given is an error naming both; the examples
use the new names; the reference lists the old ones."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from agentd import ConfigError
from agentd.config import (
    RENAMED_KEYS,
    RENAMED_PERSONA_KEYS,
    Config,
    ConfigDeprecationWarning,
    Renamed,
    _Root,
    load_config,
)
from agentd.personas import Personas, load_persona_file
from agentd.skills import SKILLS
from tests.conftest import REPO, agentd_cli, write_home


def _default(dotted: str) -> Any:
    """The built-in default of the key at ``dotted`` (a path into the config model)."""
    node: Any = _Root()
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _other_value(dotted: str) -> int | float:
    """A valid value for the key that is not its default (so reading it is seen to work)."""
    default = _default(dotted)
    if default is None:
        return 0.5
    if isinstance(default, bool) or not isinstance(default, int | float):
        raise AssertionError(f"{dotted}: no test value for {default!r}")
    return default + 1 if isinstance(default, int) else default / 2


def _toml(dotted: str, value: object) -> str:
    """``dotted = value`` as a TOML table and key."""
    table, key = dotted.rsplit(".", 1)
    return f"[{table}]\n{key} = {value}\n"


def _value(cfg: Config, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


@pytest.mark.parametrize("rename", RENAMED_KEYS, ids=[r.old for r in RENAMED_KEYS])
def test_an_old_name_is_read_as_the_new_one_with_a_warning_naming_both(tmp_path: Path, rename: Renamed) -> None:
    value = _other_value(rename.new)
    path = write_home(tmp_path, _toml(rename.old, value))
    with pytest.warns(ConfigDeprecationWarning) as caught:
        cfg = load_config(path, environ={})
    assert _value(cfg, rename.new) == value
    (message,) = [str(w.message) for w in caught if issubclass(w.category, ConfigDeprecationWarning)]
    assert str(path) in message
    assert f"{rename.old} is deprecated" in message
    assert f"use {rename.new}" in message
    assert cfg.deprecations == (message,)


def test_an_old_name_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    path = write_home(tmp_path)
    with pytest.warns(ConfigDeprecationWarning, match=r"AGENTD_MEMORY__TOP_K: memory\.top_k .* memory\.max_per_reply"):
        cfg = load_config(path, environ={"AGENTD_MEMORY__TOP_K": "7"})
    assert cfg.memory.max_per_reply == 7
    # A bad value under the old name still names the variable.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigDeprecationWarning)
        with pytest.raises(ConfigError, match="AGENTD_MEMORY__TOP_K"):
            load_config(path, environ={"AGENTD_MEMORY__TOP_K": "many"})


@pytest.mark.parametrize(
    ("text", "old", "new"),
    [
        ("[memory]\ntop_k = 4\nmax_per_reply = 5\n", "memory.top_k", "memory.max_per_reply"),
        (
            "[memory]\ncandidate_pool = 10\n[memory.tuning]\ncandidate_pool = 20\n",
            "memory.candidate_pool",
            "memory.tuning.candidate_pool",
        ),
        (
            "[runtime]\nsubagent_limit = 4\nsubagent_memory_candidates = 5\n",
            "runtime.subagent_limit",
            "runtime.subagent_memory_candidates",
        ),
    ],
)
def test_an_old_and_a_new_name_together_are_an_error_naming_both(tmp_path: Path, text: str, old: str, new: str) -> None:
    path = write_home(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(path) in str(info.value)
    assert old in info.value.reason
    assert new in info.value.reason


def test_a_tuning_knob_is_read_in_its_table_without_a_warning(tmp_path: Path) -> None:
    path = write_home(tmp_path, "[memory.tuning]\ncandidate_pool = 10\n[history.tuning]\nmax_inspected = 7\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = load_config(path, environ={"AGENTD_MEMORY__TUNING__RERANK_POOL": "4"})
    assert (cfg.memory.tuning.candidate_pool, cfg.memory.tuning.rerank_pool) == (10, 4)
    assert cfg.history.tuning.max_inspected == 7
    assert cfg.deprecations == ()


def test_the_shipped_examples_use_the_new_names() -> None:
    """agentd.toml and the example personas load without a single warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = load_config(REPO / "agentd.toml", environ={})
        personas = Personas.load(REPO / "personas", tuple(SKILLS))
    assert cfg.deprecations == ()
    assert all(p.deprecations == () for p in personas.values())
    text = (REPO / "agentd.toml").read_text(encoding="utf-8")
    for rename in RENAMED_KEYS:
        table, key = rename.old.rsplit(".", 1)
        section = text[text.index(f"[{table}]\n") :].split("\n[", 1)[0]
        assert not re.search(rf"^#?\s*{key}\s*=", section, re.M), f"agentd.toml still shows {rename.old}"


def test_an_old_persona_key_is_read_with_a_warning_and_both_are_an_error(tmp_path: Path) -> None:
    (rename,) = RENAMED_PERSONA_KEYS
    path = tmp_path / "p.toml"
    path.write_text(f'name = "p"\nmodel = "offline"\nsystem_prompt = "hi"\n{rename.old} = 64\n')
    with pytest.warns(ConfigDeprecationWarning, match=rf"{re.escape(str(path))}: {rename.old} .* use {rename.new}"):
        persona = load_persona_file(path, tuple(SKILLS))
    assert persona.max_reply_tokens == 64
    assert len(persona.deprecations) == 1
    path.write_text(f'name = "p"\nmodel = "offline"\nsystem_prompt = "hi"\n{rename.old} = 64\n{rename.new} = 32\n')
    with pytest.raises(ConfigError) as info:
        load_persona_file(path, tuple(SKILLS))
    assert rename.old in info.value.reason
    assert rename.new in info.value.reason


def test_the_reference_lists_every_deprecated_name_and_the_tuning_tables() -> None:
    page = (REPO / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    deprecated = page[page.index("## Deprecated names") :]
    rows = deprecated.splitlines()
    for rename in (*RENAMED_KEYS, *RENAMED_PERSONA_KEYS):
        new = f"| `{rename.new}` | {rename.since} | {rename.removed_in} |"
        assert any(row.startswith(f"| `{rename.old}`") and row.endswith(new) for row in rows), rename
    assert "## `[memory.tuning]`" in page
    assert "## `[history.tuning]`" in page


def test_the_cli_logs_each_old_name_it_reads(tmp_path: Path) -> None:
    """Through the entry point: one ``config_deprecated`` line per old key (the config file's
    and a persona file's), naming the new key; the command works as before."""
    path = write_home(
        tmp_path,
        "[memory]\ntop_k = 4\n",
        {"old": 'name = "old"\nmodel = "offline"\nmax_tokens = 64\nsystem_prompt = "hi"\n'},
    )
    result = agentd_cli("personas", config=path)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "config_deprecated" in line]
    assert len(lines) == 2, result.stderr
    assert any("memory.top_k" in line and "memory.max_per_reply" in line for line in lines)
    assert any("old.toml" in line and "max_reply_tokens" in line for line in lines)
    assert "old" in result.stdout


@pytest.mark.slow  # doctor loads the embedding model
def test_doctor_lists_each_old_name_as_a_warning(tmp_path: Path) -> None:
    path = write_home(
        tmp_path,
        "[history]\nsnippet_rune_limit = 100\n",
        {"old": 'name = "old"\nmodel = "offline"\nmax_tokens = 64\nsystem_prompt = "hi"\n'},
    )
    result = agentd_cli("doctor", "--json", config=path)
    assert result.returncode == 0, result.stdout + result.stderr
    said = [c for c in json.loads(result.stdout) if c["check"] == "deprecated key"]
    assert all(c["ok"] and c["warning"] for c in said)
    details = sorted(c["detail"] for c in said)
    assert len(details) == 2
    assert any("history.snippet_rune_limit" in d and "history.max_snippet_chars" in d for d in details)
    assert any("old.toml: max_tokens" in d and "max_reply_tokens" in d for d in details)
