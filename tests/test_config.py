"""Config and persona files: typed, frozen, and every mistake named by file, key and reason."""

from __future__ import annotations

import typing
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
    assert cfg.memory.max_per_reply == 3
    assert cfg.memory.min_score == 0.5
    assert cfg.memory.auto_retrieve
    assert cfg.daemon.host == "127.0.0.1"
    personas = Personas.load(cfg.personas_dir, tuple(SKILLS))
    assert len(personas) >= 2
    assert all(p.model for p in personas.values())


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no file anywhere the built-in defaults apply (3 memories per reply, 5 search results,
    a context of 2000 tokens from 20 candidates, 200k for Claude)."""
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, environ={})
    assert cfg.source == "built-in defaults"
    m = cfg.memory
    assert (m.max_per_reply, m.search_results, m.context_tokens, m.context_candidates) == (3, 5, 2000, 20)
    assert cfg.memory.retrieval_timeout_seconds == 2.0
    assert cfg.models.claude_context_window == 200_000


def test_values_are_frozen(tmp_path: Path) -> None:
    cfg = load_config(write_home(tmp_path), environ={})
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        cfg.memory.max_per_reply = 9  # type: ignore[misc]


def test_relative_database_path_is_relative_to_the_config_file(tmp_path: Path) -> None:
    cfg = load_config(write_home(tmp_path), environ={})
    assert cfg.database_url == f"sqlite:///{tmp_path / 'agentd.db'}"


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ('[memory]\nmax_per_reply = "three"\n', "memory.max_per_reply", "valid integer"),
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
    path = write_home(tmp_path, "[memory]\nmax_per_reply = 7\n")
    assert load_config(None, environ={"AGENTD_CONFIG": str(path)}).memory.max_per_reply == 7


def test_environment_overrides_single_keys_with_typed_values(tmp_path: Path) -> None:
    path = write_home(tmp_path)
    cfg = load_config(
        path,
        environ={
            "AGENTD_MEMORY__MAX_PER_REPLY": "5",
            "AGENTD_MEMORY__AUTO_RETRIEVE": "false",
            "AGENTD_DAEMON__API_KEY": "s3cret",
        },
    )
    assert cfg.memory.max_per_reply == 5
    assert cfg.memory.auto_retrieve is False
    assert cfg.daemon.api_key == "s3cret"


def test_a_bad_environment_override_names_the_variable(tmp_path: Path) -> None:
    path = write_home(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={"AGENTD_MEMORY__MAX_PER_REPLY": "many"})
    assert "AGENTD_MEMORY__MAX_PER_REPLY" in str(info.value)
    with pytest.raises(ConfigError, match="AGENTD_<SECTION>__<KEY>"):
        load_config(path, environ={"AGENTD_MEMORY__": "3"})


def test_other_agentd_variables_are_never_fatal(tmp_path: Path) -> None:
    """The client's variables are known; any other (a typo, perhaps) is ignored and listed."""
    environ = {
        "AGENTD_URL": "http://127.0.0.1:9",
        "AGENTD_API_KEY": "k",
        "AGENTD_HOME": str(tmp_path / "home"),
        "AGENTD_TOPK": "3",
        "AGENTD_MEMORY__MAX_PER_REPLY": "4",
    }
    cfg = load_config(write_home(tmp_path), environ=environ)
    assert cfg.memory.max_per_reply == 4
    assert cfg.ignored_env == ("AGENTD_TOPK",)


def test_the_data_directory_is_agentd_home_else_the_platforms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no [database] url the database is agentd.db in the data directory."""
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    cfg = load_config(None, environ={"AGENTD_HOME": str(home)})
    assert cfg.data_dir == home.resolve()
    assert cfg.database_url == f"sqlite:///{home.resolve() / 'agentd.db'}"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    cfg = load_config(None, environ={})
    assert cfg.data_dir == tmp_path / "xdg-data" / "agentd"
    assert cfg.source == "built-in defaults"


def test_the_users_own_config_is_read_from_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$AGENTD_HOME/agentd.toml (else the platform's config directory) when ./agentd.toml is absent;
    ./agentd.toml wins over it."""
    home = tmp_path / "home"
    write_home(home, "[memory]\nmax_per_reply = 6\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(None, environ={"AGENTD_HOME": str(home)})
    assert cfg.source == str(home / "agentd.toml")
    assert cfg.memory.max_per_reply == 6
    assert cfg.personas_dir == (home / "personas").resolve()
    write_home(elsewhere, "[memory]\nmax_per_reply = 2\n")
    assert load_config(None, environ={"AGENTD_HOME": str(home)}).memory.max_per_reply == 2
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    write_home(tmp_path / "xdg" / "agentd", "[memory]\nmax_per_reply = 9\n")
    monkeypatch.chdir(tmp_path)
    assert load_config(None, environ={}).memory.max_per_reply == 9


def test_without_a_personas_dir_the_shipped_personas_are_used(tmp_path: Path) -> None:
    path = tmp_path / "agentd.toml"
    path.write_text("[memory]\nmax_per_reply = 3\n")
    cfg = load_config(path, environ={})
    personas = Personas.load(cfg.personas_dir, tuple(SKILLS))
    assert {"buddy", "researcher"} <= set(personas)


def _keys(model: type[pydantic.BaseModel], prefix: str = "") -> dict[str, object]:
    """Every leaf key of a config section with its default (nested sections flattened)."""
    found: dict[str, object] = {}
    for name, field in model.model_fields.items():
        kinds = typing.get_args(field.annotation) or (field.annotation,)
        kind = next((k for k in kinds if isinstance(k, type) and issubclass(k, pydantic.BaseModel)), None)
        if kind is not None:
            found.update(_keys(kind, f"{prefix}{name}."))
        else:
            found[f"{prefix}{name}"] = field.get_default(call_default_factory=True)
    return found


def test_the_shipped_agentd_toml_lists_every_key_with_its_default() -> None:
    """agentd.toml (what `agentd init` writes) shows every key, and every value it sets is the
    built-in default, but for the personas directory that `agentd init` writes next to it."""
    from agentd.config import _Root

    text = (REPO / "agentd.toml").read_text(encoding="utf-8")
    sections = {name: f.annotation for name, f in _Root.model_fields.items()}
    for section, model in sections.items():
        if section == "channels":
            assert "[channels." in text
            continue
        assert f"[{section}]" in text or f"[{section}." in text, section
        assert isinstance(model, type)
        assert issubclass(model, pydantic.BaseModel)
        for key in _keys(model):
            leaf = key.rsplit(".", 1)[-1]
            shown = (f"\n{leaf} =", f"\n# {leaf} =", f"[{section}.{leaf}]")
            assert any(s in text for s in shown), f"{section}.{key} is not in agentd.toml"
    import tomllib

    data = tomllib.loads(text)
    assert data["personas"] == {"dir": "personas"}
    data["personas"] = {}
    assert _Root.model_validate(data) == _Root()


@pytest.mark.parametrize(
    ("persona", "key", "reason"),
    [
        ('name = "x"\nmodel = "offline"\nsystem_prompt = "hi"\n', "name", "file name"),
        ('name = "p"\nsystem_prompt = "hi"\n', "model", "Field required"),
        (
            'name = "p"\nmodel = "offline"\nsystem_prompt = "hi"\nmax_reply_tokens = "lots"\n',
            "max_reply_tokens",
            "integer",
        ),
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
