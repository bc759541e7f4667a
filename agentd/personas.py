"""Personas: ``personas/*.toml``, validated the same way as the config.

A persona file::

    name = "buddy"                 # must match the file name (buddy.toml)
    model = "offline"              # any litellm model string
    system_prompt = "You are ..."
    max_tokens = 1024              # output reserve, subtracted from the window
    context_window = 8192          # optional: overrides the window map
    channels = ["general"]         # channels bound to this persona (globs allowed)
    skills = ["remember", "recall", "delegate"]
    mcp_servers = ["files"]        # MCP servers ([mcp.servers.NAME]) whose tools it may call
    project_dir = "../myproject"   # optional: its AGENTS.md is the project context
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentd._exceptions import ConfigError, NotFound

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class _PersonaFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(pattern=_NAME.pattern)
    model: str = Field(min_length=1)
    system_prompt: str = Field(min_length=1)
    description: str = ""
    max_tokens: int = Field(default=1024, ge=1)
    context_window: int | None = Field(default=None, ge=256)
    temperature: float | None = Field(default=None, ge=0, le=2)
    channels: list[str] = []
    skills: list[str] = ["remember", "recall"]
    mcp_servers: list[str] = []
    project_dir: str | None = None
    #: For OpenAI-compatible servers: where to send requests and which env var holds the key.
    api_base: str | None = None
    api_key_env: str | None = None


@dataclass(frozen=True)
class Persona:
    """One persona, validated, with its project directory resolved."""

    name: str
    model: str
    system_prompt: str
    description: str
    max_tokens: int
    context_window: int | None
    temperature: float | None
    channels: tuple[str, ...]
    skills: tuple[str, ...]
    project_dir: Path | None
    api_base: str | None
    api_key_env: str | None
    source: str
    #: MCP servers (``[mcp.servers.NAME]`` in agentd.toml) whose tools it may call.
    mcp_servers: tuple[str, ...] = ()

    def serves(self, channel: str) -> bool:
        """True when ``channel`` is bound to this persona (exact name or glob)."""
        return any(fnmatch.fnmatchcase(channel, pat) for pat in self.channels)


def _persona_from(path: Path, data: dict[str, object], skills: Collection[str]) -> Persona:
    try:
        raw = _PersonaFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        reason = "unknown key" if err["type"] == "extra_forbidden" else str(err["msg"])
        raise ConfigError(str(path), key, reason) from None
    if raw.name != path.stem:
        raise ConfigError(str(path), "name", f"must match the file name {path.stem!r}")
    for skill in raw.skills:
        if skill not in skills:
            raise ConfigError(str(path), "skills", f"unknown skill {skill!r}; known: {', '.join(skills)}")
    project = None
    if raw.project_dir:
        project = (path.parent / raw.project_dir).resolve()
        if not project.is_dir():
            raise ConfigError(str(path), "project_dir", f"not a directory: {project}")
    return Persona(
        name=raw.name,
        model=raw.model,
        system_prompt=raw.system_prompt,
        description=raw.description,
        max_tokens=raw.max_tokens,
        context_window=raw.context_window,
        temperature=raw.temperature,
        channels=tuple(raw.channels),
        skills=tuple(raw.skills),
        project_dir=project,
        api_base=raw.api_base,
        api_key_env=raw.api_key_env,
        source=str(path),
        mcp_servers=tuple(dict.fromkeys(raw.mcp_servers)),
    )


def load_persona_file(path: Path, skills: Collection[str]) -> Persona:
    """Read and validate one persona file (``skills``: the skill names agentd has)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "", f"not valid TOML: {exc}") from exc
    return _persona_from(path, data, skills)


class Personas(Mapping[str, Persona]):
    """The loaded personas by name; lookups of unknown names raise :class:`NotFound`."""

    def __init__(self, personas: Mapping[str, Persona]) -> None:
        self._by_name = dict(sorted(personas.items()))

    @classmethod
    def load(cls, directory: Path, skills: Collection[str]) -> Personas:
        """Load every ``*.toml`` in ``directory`` (a missing directory is an error); ``skills``
        are the skill names a persona may enable."""
        if not directory.is_dir():
            raise ConfigError(str(directory), "personas.dir", "not a directory")
        return cls({p.name: p for p in (load_persona_file(f, skills) for f in sorted(directory.glob("*.toml")))})

    def __getitem__(self, name: str) -> Persona:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(self._by_name) or "none"
            raise NotFound("persona", name, f"known personas: {known}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def bound_to(self, channel: str) -> list[Persona]:
        """The personas whose ``channels`` include ``channel``."""
        return [p for p in self._by_name.values() if p.serves(channel)]
