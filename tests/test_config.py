"""Config and persona files: typed, frozen, and every mistake named by file, key and reason."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from agentd import ConfigError
from agentd.config import load_config
from agentd.personas import Personas
from agentd.skills import SKILLS
from tests.conftest import REPO, write_home


def test_the_shipped_config_and_personas_load_as_they_are() -> None:
    """agentd.toml in the repository works unchanged, with at least two personas."""
    cfg = load_config(REPO / "agentd.toml", environ={})
    assert cfg.memory.top_k == 3 and cfg.memory.min_score == 0.5 and cfg.memory.auto_retrieve
    assert cfg.daemon.host == "127.0.0.1"
    personas = Personas.load(cfg.personas_dir, tuple(SKILLS))
    assert len(personas) >= 2
    assert all(p.model for p in personas.values())


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no file anywhere the built-in defaults apply (seed defaults included)."""
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, environ={})
    assert cfg.source == "built-in defaults"
    assert (cfg.memory.top_k, cfg.memory.recall_limit, cfg.memory.token_budget, cfg.memory.limit) == (3, 5, 2000, 20)
    assert cfg.memory.retrieval_timeout_seconds == 2.0
    assert cfg.models.claude_context_window == 200_000


def test_values_are_frozen(tmp_path: Path) -> None:
    cfg = load_config(write_home(tmp_path), environ={})
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        cfg.memory.top_k = 9  # type: ignore[misc]


def test_relative_database_path_is_relative_to_the_config_file(tmp_path: Path) -> None:
    cfg = load_config(write_home(tmp_path), environ={})
    assert cfg.database_url == f"sqlite:///{tmp_path / 'agentd.db'}"


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ('[memory]\ntop_k = "three"\n', "memory.top_k", "valid integer"),
        ("[memory]\ntopk = 3\n", "memory.topk", "unknown key"),
        ("[nonsense]\nx = 1\n", "nonsense", "unknown key"),
        ("[memory]\nmin_score = 1.5\n", "memory.min_score", "less than or equal to 1"),
        ('[embedding]\nprovider = "magic"\n', "embedding.provider", "'local', 'litellm' or 'none'"),
        (
            '[embedding]\nmodel = "bert-huge"\n',
            "embedding.model",
            "unknown local model 'bert-huge'; use one of e5-small-v2",
        ),
    ],
)
def test_a_bad_key_names_the_file_the_key_and_the_reason(tmp_path: Path, text: str, key: str, reason: str) -> None:
    path = write_home(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert info.value.source == str(path)
    assert info.value.key == key
    assert reason in info.value.reason


def test_invalid_toml_and_a_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[memory\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, environ={})
    with pytest.raises(ConfigError, match="file not found") as info:
        load_config(tmp_path / "missing.toml", environ={})
    assert "missing.toml" in str(info.value)


def test_agentd_config_env_names_the_file(tmp_path: Path) -> None:
    path = write_home(tmp_path, "[memory]\ntop_k = 7\n")
    assert load_config(None, environ={"AGENTD_CONFIG": str(path)}).memory.top_k == 7


def test_environment_overrides_single_keys_with_typed_values(tmp_path: Path) -> None:
    path = write_home(tmp_path)
    cfg = load_config(
        path,
        environ={
            "AGENTD_MEMORY__TOP_K": "5",
            "AGENTD_MEMORY__AUTO_RETRIEVE": "false",
            "AGENTD_DAEMON__API_KEY": "s3cret",
        },
    )
    assert cfg.memory.top_k == 5
    assert cfg.memory.auto_retrieve is False
    assert cfg.daemon.api_key == "s3cret"


def test_a_bad_environment_override_names_the_variable(tmp_path: Path) -> None:
    path = write_home(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={"AGENTD_MEMORY__TOP_K": "many"})
    assert "AGENTD_MEMORY__TOP_K" in str(info.value)
    with pytest.raises(ConfigError, match="AGENTD_<SECTION>__<KEY>"):
        load_config(path, environ={"AGENTD_TOPK": "3"})


@pytest.mark.parametrize(
    ("persona", "key", "reason"),
    [
        ('name = "x"\nmodel = "offline"\nsystem_prompt = "hi"\n', "name", "file name"),
        ('name = "p"\nsystem_prompt = "hi"\n', "model", "Field required"),
        ('name = "p"\nmodel = "offline"\nsystem_prompt = "hi"\nmax_tokens = "lots"\n', "max_tokens", "integer"),
        ('name = "p"\nmodel = "offline"\nsystem_prompt = "hi"\nskills = ["fly"]\n', "skills", "unknown skill"),
        ('name = "p"\nmodel = "offline"\nsystem_prompt = "hi"\ncolour = "red"\n', "colour", "unknown key"),
    ],
)
def test_a_bad_persona_file_names_the_file_the_key_and_the_reason(
    tmp_path: Path, persona: str, key: str, reason: str
) -> None:
    write_home(tmp_path, personas={"p": persona})
    with pytest.raises(ConfigError) as info:
        Personas.load(tmp_path / "personas", tuple(SKILLS))
    assert info.value.source.endswith("p.toml")
    assert info.value.key == key
    assert reason in info.value.reason
