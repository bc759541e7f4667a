"""What the API answers: one typed model per response, so ``/docs`` shows what comes back, and
the classes :mod:`agentd.client` returns (the same classes: one shape per answer).

Field names are snake_case across the API. The one exception is the memory
service's ``/v1/memory/context`` answer, whose fields (``memoriesUsed``,
``tokensUsed``, ``tokenBudget``) are a published contract kept as they are.
Errors have one shape, :class:`ErrorResponse`, with a code from the catalogue
(:class:`agentd.ErrorCode`).

A client reads answers of daemons newer than itself: a field it does not know is ignored
(``extra="ignore"``), never an error.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentd._exceptions import CATALOGUE, ErrorCode
from agentd.ops.models import (
    Forgotten,
    HistoryEntryOut,
    ImportResponse,
    KnownFactsResponse,
    MemoryAdded,
    MemoryHistory,
    MemoryHitOut,
    MemoryList,
    MemoryOut,
    SearchResponse,
    SkippedItem,
    UserExport,
    UserForgotten,
)

#: The API's answers: its own, and the operations' results (:mod:`agentd.ops.models`) re-exported.
__all__ = [
    "BudgetResponse",
    "CapOut",
    "ChannelList",
    "ChannelOut",
    "COMMON_ERRORS",
    "error_responses",
    "ErrorDetail",
    "ErrorResponse",
    "Forgotten",
    "Health",
    "HistoryEntryOut",
    "ImportResponse",
    "KnownFactsResponse",
    "MemoryAdded",
    "MemoryHistory",
    "MemoryHitOut",
    "MemoryList",
    "MemoryOut",
    "MessageOut",
    "MessagePage",
    "openai_error_responses",
    "OpenAIErrorDetail",
    "OpenAIErrorResponse",
    "PersonaList",
    "PersonaOut",
    "PostAccepted",
    "SearchResponse",
    "SkippedItem",
    "StoreHealth",
    "UsageResponse",
    "UsageRowOut",
    "UsageTally",
    "UserExport",
    "UserForgotten",
]


class _Out(BaseModel):
    """An answer: frozen, and tolerant of fields a newer daemon adds (a client ignores them)."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class ErrorDetail(_Out):
    """What went wrong."""

    code: ErrorCode = Field(description="From the catalogue (see the README's error table).")
    field: str | None = Field(description="The request field (or header) the error is about, if one.")
    message: str = Field(description="One line for a person: what is wrong and what to do.")


class ErrorResponse(_Out):
    """Every error answer: ``{"error": {"code", "field", "message"}}``."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the error statuses a route may answer with."""
    found: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        codes = sorted(str(c) for c, info in CATALOGUE.items() if info.status == status)
        found[status] = {"model": ErrorResponse, "description": "Error; code: " + ", ".join(codes)}
    return found


class OpenAIErrorDetail(_Out):
    """What went wrong, as OpenAI's API says it."""

    message: str
    type: str = Field(description="invalid_request_error | rate_limit_error | server_error")
    param: str | None
    code: str | None = Field(description="agentd's code (see the README's error table); invalid_api_key for 401.")


class OpenAIErrorResponse(_Out):
    """Every error answer of the OpenAI-compatible routes: ``{"error": {"message", "type", "param", "code"}}``."""

    error: OpenAIErrorDetail


def openai_error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries of the OpenAI-compatible routes (OpenAI's error shape; 422 is 400 there)."""
    return {status: {"model": OpenAIErrorResponse, "description": "Error (OpenAI's shape)"} for status in statuses}


#: Errors any route may answer with (the Host and key checks, the body limit, a bad value, a
#: stopping daemon or an unwritable store, a bug).
COMMON_ERRORS = error_responses(400, 401, 413, 421, 422, 500, 503)


class MessageOut(_Out):
    """One stored message of a channel."""

    id: int
    channel: str
    persona: str | None
    role: str
    author: str
    content: str
    source: str
    status: str
    reply_to: int | None
    created_at: str
    context: dict[str, Any] | None = Field(
        None,
        description="With ?context=true, on a reply that has a context record: its model, recalled memories "
        "(memories, episodes), retrieval and budget. A user's own memories show their text only to an admin "
        "(withheld: true otherwise, as on the events feed).",
    )


class MessagePage(_Out):
    """``GET /v1/channels/{channel}/messages``."""

    channel: str
    messages: list[MessageOut]
    last_id: int
    more_before: bool = Field(
        False, description="With ?before=: older messages remain (page on with before= the first id here)."
    )


class ChannelOut(_Out):
    """One channel a caller may use."""

    name: str
    visibility: str | None = Field(description="direct | shared as declared (null: never declared).")
    owner: str | None = Field(description="The user of a direct channel.")
    personas: list[str] = Field(description="The personas bound to it ([channels.NAME] personas), first the default.")
    message_count: int


class ChannelList(_Out):
    """``GET /v1/channels``."""

    channels: list[ChannelOut]


class PostAccepted(_Out):
    """``POST /v1/channels/{channel}/messages``: stored, and on its way to the persona."""

    id: int
    channel: str
    #: The persona that answers it (in a room, the first; null: nobody is asked to).
    persona: str | None
    #: In a room, the personas that answer it after ``persona``, in order.
    triggered: list[str] = []
    request_id: str
    status: str


class PersonaOut(_Out):
    """One persona."""

    name: str
    model: str
    description: str
    context_window: int
    window_source: str
    output_reserve: int
    channels: list[str]
    skills: list[str]
    mcp_servers: list[str] = Field(default_factory=list, description="MCP servers whose tools it may call.")


class PersonaList(_Out):
    """``GET /v1/personas``."""

    personas: list[PersonaOut]
    channel_bindings: dict[str, list[str]]
    default_user: str = Field(
        description="Who the web page (like the CLI) takes you for unless told: [user] name, else the daemon's "
        "login name."
    )


class BudgetResponse(_Out):
    """``GET /v1/budget``: where the tokens of the next prompt would go."""

    persona: str
    channel: str
    budget: dict[str, Any] = Field(description="The ContextBudget: tokens per section of the prompt.")
    memories: list[MemoryHitOut]
    profile: list[MemoryOut] = Field(
        default_factory=list, description="The user's profile memories given on every turn ([memory] profile_tokens)."
    )
    user_history: list[str]
    episodes: list[MemoryHitOut] = Field(
        default_factory=list, description="Earlier exchanges recalled by meaning ([episodes]), best first."
    )


class StoreHealth(_Out):
    """Whether the store can be written."""

    writable: bool = Field(description="False while the last write failed (disk full, I/O error).")
    error: str | None = Field(None, description="Why the last write failed.")


class Health(_Out):
    """``GET /healthz``: without a key (on a daemon that needs one) only ``status``."""

    status: str = Field(description="ok | degraded | stopping")
    version: str | None = None
    healthy: bool | None = None
    reason: str | None = None
    actors: list[dict[str, Any]] | None = None
    store: StoreHealth | None = None
    workers: list[dict[str, Any]] | None = Field(
        None,
        description="With worker processes ([runtime] workers): each one's index, process id, whether it "
        "runs and whether it answered.",
    )
    cluster: dict[str, Any] | None = Field(
        None,
        description="PostgreSQL only: this daemon's name among those sharing the store, and how many "
        "(persona, channel) pairs it answers now.",
    )
    admission: dict[str, Any] | None = Field(
        None,
        description="Admission control: messages accepted and not yet answered (pending), the bounds in force "
        "(max_pending, max_pending_per_channel), what they follow (replies_per_second, turn_seconds), and "
        "posts refused with 429 since start (refused).",
    )


class UsageTally(_Out):
    """Calls, tokens and cost (litellm's cost map, priced when asked; 0 for unpriced models)."""

    calls: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float


class UsageRowOut(UsageTally):
    """One group: its key (``persona`` and ``model``, or ``day``, ``persona`` or ``model``), its totals,
    and those of each kind of call (``reply``, ``delegation``, ``extraction``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    by_kind: dict[str, UsageTally]


class CapOut(_Out):
    """One spend cap, what was spent toward it today (UTC) and what is left."""

    kind: str = Field(description="persona | user")
    name: str = Field(description="The persona's name or the user's id.")
    cap: str = Field(description="max_tokens_per_day | max_cost_usd_per_day")
    limit: float
    used: float
    left: float
    resets_at: str = Field(description="When it resets: the next 00:00 UTC.")


class UsageResponse(_Out):
    """``GET /v1/usage``: tokens and cost per group, from the stored context records (as ``agentd usage --json``)."""

    by: str = Field(description="persona-model | day | persona | model")
    persona: str | None
    since: str | None
    rows: list[UsageRowOut]
    total: UsageTally
    caps: list[CapOut] = Field(
        default_factory=list,
        description="The spend caps configured (of the persona asked for, if one was), and the user cap of each "
        "user who spent today: what is used and left today.",
    )
