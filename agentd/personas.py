"""Personas: ``personas/*.toml``, validated the same way as the config.

A persona file::

    name = "buddy"                 # must match the file name (buddy.toml)
    model = "offline"              # any litellm model string
    system_prompt = "You are ..."
    max_reply_tokens = 1024        # a reply's length, at most (reserved in the window)
    context_window = 8192          # optional: overrides the window map
    channels = ["general"]         # channels bound to this persona (globs allowed)
    skills = ["remember", "recall", "delegate"]
    mcp_servers = ["files"]        # MCP servers ([mcp.servers.NAME]) whose tools it may call
    project_dir = "../myproject"   # optional: its AGENTS.md is the project context
    max_tokens_per_day = 200000    # optional spend caps, per UTC day (0: none)
    max_cost_usd_per_day = 2.5
    model_timeout_seconds = 300    # optional: silence allowed from the model (default [models] llm_timeout_seconds)
    owners = ["alice"]             # users who decide its tools' approvals (besides admin keys)

    [tools."mcp__files__read"]     # a tool's policy (a skill's name, or mcp__SERVER__TOOL)
    users = ["alice", "bob"]       # who may trigger it (default: everyone who may talk to it)
    channels = ["dm-*"]            # where (globs; default: everywhere it answers)
    approval = "required"          # "never" (default) | "required": an owner approves each call

    [[routines]]                   # a turn of its own at each occurrence (docs/guides/schedules.md)
    name = "plan"
    cron = "0 9 * * 1-5"           # five-field cron: every weekday at 09:00
    timezone = "Europe/Paris"      # IANA timezone (default UTC)
    channel = "general"
    prompt = "Post the day's plan."
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentd._exceptions import ConfigError, NotFound
from agentd.config import RENAMED_PERSONA_KEYS, apply_renames

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


#: How a persona's MCP tools are named to its model (agentd.mcp.client.tools.offered_name).
MCP_PREFIX = "mcp__"
#: The approval settings a tool policy takes.
APPROVALS = ("never", "required")


class _ToolPolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    users: list[str] | None = None
    channels: list[str] | None = None
    approval: Literal["never", "required"] = "never"


class _RoutineEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(pattern=_NAME.pattern)
    cron: str = Field(min_length=1, max_length=128)
    timezone: str = Field(default="UTC", min_length=1, max_length=64)
    channel: str = Field(min_length=1, max_length=128)
    prompt: str = Field(min_length=1)


@dataclass(frozen=True)
class Routine:
    """A persona file's ``[[routines]]`` entry: a turn of the persona's own at each occurrence of
    ``cron`` in ``timezone``, in ``channel``, triggered by ``prompt`` (stored as a schedule)."""

    name: str
    cron: str
    timezone: str
    channel: str
    prompt: str


class _PersonaFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(pattern=_NAME.pattern)
    model: str = Field(min_length=1)
    system_prompt: str = Field(min_length=1)
    description: str = ""
    #: A reply's length, at most, in tokens (the model is asked for no more, and the prompt leaves room for it).
    max_reply_tokens: int = Field(default=1024, ge=1)
    context_window: int | None = Field(default=None, ge=256)
    temperature: float | None = Field(default=None, ge=0, le=2)
    channels: list[str] = []
    skills: list[str] = ["remember", "recall"]
    mcp_servers: list[str] = []
    project_dir: str | None = None
    #: For OpenAI-compatible servers: where to send requests and which env var holds the key.
    api_base: str | None = None
    api_key_env: str | None = None
    #: Spend cap: tokens per UTC day, every model call of its turns and extraction (0: none).
    max_tokens_per_day: int = Field(default=0, ge=0)
    #: Spend cap: US dollars per UTC day, by litellm's price map (0: none).
    max_cost_usd_per_day: float = Field(default=0.0, ge=0)
    #: How long the model may stay silent (no first token, no next token) before the turn fails
    #: with ``llm_timeout``; default ``[models] llm_timeout_seconds``. Raise it for a slow model.
    model_timeout_seconds: float | None = Field(default=None, gt=0, le=3600)
    #: Users who decide the approvals of its tools (admin keys always may).
    owners: list[str] = []
    #: Each tool's policy, by the name the model is offered (``[tools."NAME"]``).
    tools: dict[str, _ToolPolicyFile] = {}
    #: Turns of its own at each occurrence of a cron expression: ``[[routines]]`` with ``name``, ``cron``,
    #: ``timezone``, ``channel`` and ``prompt`` (docs/guides/schedules.md).
    routines: list[_RoutineEntry] = []


@dataclass(frozen=True)
class ToolPolicy:
    """Who may trigger one tool of a persona, where, and whether an owner approves each call.

    ``users`` / ``channels`` ``None``: everyone who may talk to the persona, everywhere it answers.
    """

    name: str
    users: tuple[str, ...] | None = None
    channels: tuple[str, ...] | None = None
    approval: str = "never"

    def allows(self, user: str | None, channel: str) -> bool:
        """True when ``user`` may trigger the tool in ``channel`` (channels may be globs)."""
        if self.users is not None and (user is None or user not in self.users):
            return False
        return self.channels is None or any(fnmatch.fnmatchcase(channel, pat) for pat in self.channels)

    @property
    def needs_approval(self) -> bool:
        """True when each call waits for an owner's decision."""
        return self.approval == "required"


@dataclass(frozen=True)
class Persona:
    """One persona, validated, with its project directory resolved."""

    name: str
    model: str
    system_prompt: str
    description: str
    max_reply_tokens: int
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
    #: Tokens (prompt and completion) this persona may spend per UTC day (0: no cap).
    max_tokens_per_day: int = 0
    #: US dollars (litellm's price map) this persona may spend per UTC day (0: no cap).
    max_cost_usd_per_day: float = 0.0
    #: Users who decide its tools' approvals (besides admin keys).
    owners: tuple[str, ...] = ()
    #: The policies of its tools that have one (``[tools."NAME"]``), in file order.
    tool_policies: tuple[ToolPolicy, ...] = ()
    #: Seconds of silence from its model before a turn fails (``None``: ``[models] llm_timeout_seconds``).
    model_timeout_seconds: float | None = None

    #: Its ``[[routines]]``, kept in step with the schedules at the daemon's start.
    routines: tuple[Routine, ...] = ()
    #: A warning for each deprecated key its file gave (``RENAMED_PERSONA_KEYS``), naming the new one.
    deprecations: tuple[str, ...] = ()

    def policy(self, tool: str) -> ToolPolicy:
        """``tool``'s policy (the default when the file sets none: everyone, everywhere, no approval)."""
        return next((p for p in self.tool_policies if p.name == tool), ToolPolicy(tool))

    @property
    def asks_approval(self) -> bool:
        """True when one of its tools needs an owner's approval for each call."""
        return any(p.needs_approval for p in self.tool_policies)

    def serves(self, channel: str) -> bool:
        """True when ``channel`` is bound to this persona (exact name or glob)."""
        return any(fnmatch.fnmatchcase(channel, pat) for pat in self.channels)


def _persona_from(
    path: Path, data: dict[str, object], skills: Collection[str] | Mapping[str, Collection[str]]
) -> Persona:
    deprecations = apply_renames(data, RENAMED_PERSONA_KEYS, str(path))
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
    offered = {tool for skill in raw.skills for tool in (skills[skill] if isinstance(skills, Mapping) else (skill,))}
    policies = _tool_policies(path, raw, offered)
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
        max_reply_tokens=raw.max_reply_tokens,
        context_window=raw.context_window,
        temperature=raw.temperature,
        channels=tuple(raw.channels),
        skills=tuple(raw.skills),
        project_dir=project,
        api_base=raw.api_base,
        api_key_env=raw.api_key_env,
        source=str(path),
        mcp_servers=tuple(dict.fromkeys(raw.mcp_servers)),
        max_tokens_per_day=raw.max_tokens_per_day,
        max_cost_usd_per_day=raw.max_cost_usd_per_day,
        owners=tuple(raw.owners),
        tool_policies=policies,
        routines=_routines(path, raw.routines),
        model_timeout_seconds=raw.model_timeout_seconds,
        deprecations=deprecations,
    )


def _tool_policies(path: Path, raw: _PersonaFile, offered: Collection[str]) -> tuple[ToolPolicy, ...]:
    """The ``[tools."NAME"]`` tables as policies (``offered``: the tools its skills offer); a name
    that is none of the persona's tools is an error (a misspelt name would otherwise leave the
    tool open to everyone)."""
    found: list[ToolPolicy] = []
    for name, entry in raw.tools.items():
        key = f"tools.{name}"
        if name.startswith(MCP_PREFIX):
            server = name[len(MCP_PREFIX) :].split("__", 1)[0]
            if "__" not in name[len(MCP_PREFIX) :] or server not in raw.mcp_servers:
                listed = ", ".join(raw.mcp_servers) or "none"
                raise ConfigError(
                    str(path), key, f"names no tool of its MCP servers (mcp__SERVER__TOOL; its servers: {listed})"
                )
        elif name not in offered:
            enabled = ", ".join(sorted(offered)) or "none"
            raise ConfigError(
                str(path),
                key,
                f"names no tool of this persona (its skills' tools: {enabled}; MCP tools: mcp__SERVER__TOOL)",
            )
        for field_name, values in (("users", entry.users), ("channels", entry.channels)):
            if values is not None and not all(isinstance(v, str) and v.strip() for v in values):
                raise ConfigError(str(path), f"{key}.{field_name}", "must be a list of non-empty names")
        users = tuple(entry.users) if entry.users is not None else None
        channels = tuple(entry.channels) if entry.channels is not None else None
        found.append(ToolPolicy(name, users, channels, entry.approval))
    return tuple(found)


def _routines(path: Path, entries: list[_RoutineEntry]) -> tuple[Routine, ...]:
    """The routines, each checked as a schedule is (its cron, timezone and channel)."""
    from agentd._exceptions import InvalidInput
    from agentd.access.scopes import check_identifier
    from agentd.timing.recurrence import check_cron, zone

    found: dict[str, Routine] = {}
    for i, entry in enumerate(entries):
        try:
            cron = check_cron(entry.cron)
            zone(entry.timezone)
            check_identifier("channel", entry.channel)
        except InvalidInput as exc:
            raise ConfigError(str(path), f"routines.{i}.{exc.field}", exc.reason) from None
        if entry.name in found:
            raise ConfigError(str(path), f"routines.{i}.name", f"{entry.name!r} names two routines")
        found[entry.name] = Routine(entry.name, cron, entry.timezone, entry.channel, entry.prompt)
    return tuple(found.values())


def load_persona_file(path: Path, skills: Collection[str] | Mapping[str, Collection[str]]) -> Persona:
    """Read and validate one persona file (``skills``: the skill names agentd has, or each with the
    tools it offers when a skill offers several)."""
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
    def load(cls, directory: Path, skills: Collection[str] | Mapping[str, Collection[str]]) -> Personas:
        """Load every ``*.toml`` in ``directory`` (a missing directory is an error); ``skills``
        are the skill names a persona may enable (as :func:`load_persona_file` takes them)."""
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
