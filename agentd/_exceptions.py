"""agentd's errors: one catalogue of error codes, and the exceptions that carry them.

Every error a client can see — the JSON error body of the HTTP API
(``{"error": {"code", "field", "message"}}``), the ``error`` event of a turn's
stream, a tool result's ``error`` — carries a code from :class:`ErrorCode`, and
each code has one HTTP status and one meaning (:data:`CATALOGUE`). The README
and the OpenAPI schema list them from here.

Every error agentd raises on purpose derives from :class:`AgentdError`; third-party
errors are mapped once, at the module that owns the library, with
``raise ... from exc``::

    AgentdError
    ├── ConfigError               bad agentd.toml / persona file / env override
    ├── InvalidInput              a caller's value is wrong (field + reason)
    ├── NotFound                  an unknown persona, memory, message, channel
    ├── Forbidden                 the caller's key may not do this
    ├── UnauthorizedCaller        no key, or one not valid (or revoked)
    ├── ShuttingDown              the daemon accepts no new work
    ├── Overloaded                as much work is accepted and unanswered as allowed: retry later
    ├── ChatNetworkError          a channel adapter's chat network failed (raised by the adapter)
    │   ├── NetworkUnavailable    not reachable now: the adapter retries
    │   └── NetworkRefused        it refused (a login, a room, an event): retrying will not help
    ├── TooManyFollowers          a channel, or a key, follows as many feeds as it may
    ├── AlreadyDecided            an approval was decided already (each is decided once)
    ├── StoreError                the database cannot be opened or written
    │   └── EmbeddingMismatch     the store's vectors come from another model
    ├── EmbedderError             the embedding model failed
    │   ├── EmbedderNotConfigured no embedder is configured
    │   ├── EmbedderTimeout       no answer within the timeout
    │   └── EmbedderBadOutput     it answered something that is not a vector of the store
    ├── ContextOverflow           system prompt + current message exceed the window
    ├── BudgetExceeded            a spend cap (persona's or user's, per UTC day) is reached
    ├── TurnError                 a turn run for a caller (MCP's chat) ended with an error event
    ├── LLMError                  the chat model failed
    │   ├── LLMAuthError          credentials missing or rejected
    │   ├── LLMTimeout            no answer within the timeout
    │   ├── LLMRateLimited        the provider said slow down (after retries)
    │   ├── LLMBadRequest         the provider refused the request
    │   ├── LLMUnreachable        the connection was refused or dropped before an answer
    │   ├── LLMHttpError          another HTTP error status from the provider
    │   ├── LLMTruncated          the stream ended before the model finished
    │   └── LLMMalformed          the answer could not be read
    └── SkillError                a tool call failed
        ├── SkillInvalidInput     the model's arguments are wrong
        └── SkillExecutionFailed  the tool could not do its work
            └── McpServerError    a tool of an MCP server ([mcp.servers.NAME]) failed
                ├── McpUnavailable  the server could not be started or reached, or died
                ├── McpTimeout      it did not answer in time
                └── McpToolError    it answered the call with an error
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar


class ErrorCode(StrEnum):
    """Every error code a client of agentd can see."""

    # The request
    INVALID_INPUT = "invalid_input"
    MALFORMED_JSON = "malformed_json"
    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    BODY_TOO_LARGE = "body_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    HOST_NOT_ALLOWED = "host_not_allowed"
    # The daemon and its store
    CONFIG_ERROR = "config_error"
    SHUTTING_DOWN = "shutting_down"
    OVERLOADED = "overloaded"
    STORE_ERROR = "store_error"
    EMBEDDING_MISMATCH = "embedding_mismatch"
    INTERNAL_ERROR = "internal_error"
    # The embedder
    EMBEDDER_NOT_CONFIGURED = "embedder_not_configured"
    EMBEDDER_UNAVAILABLE = "embedder_unavailable"
    EMBEDDER_TIMEOUT = "embedder_timeout"
    EMBEDDER_BAD_OUTPUT = "embedder_bad_output"
    # A turn
    CONTEXT_OVERFLOW = "context_overflow"
    BUDGET_EXCEEDED = "budget_exceeded"
    INTERRUPTED = "interrupted"
    PERSONA_UNHEALTHY = "persona_unhealthy"
    REPLY_TIMEOUT = "reply_timeout"
    FEED_OVERFLOW = "feed_overflow"
    TOO_MANY_FOLLOWERS = "too_many_followers"
    # The chat model
    LLM_ERROR = "llm_error"
    LLM_AUTH = "llm_auth"
    LLM_TIMEOUT = "llm_timeout"
    LLM_RATE_LIMITED = "llm_rate_limited"
    LLM_BAD_REQUEST = "llm_bad_request"
    LLM_UNREACHABLE = "llm_unreachable"
    LLM_HTTP_ERROR = "llm_http_error"
    LLM_TRUNCATED = "llm_truncated"
    LLM_MALFORMED = "llm_malformed"
    # agentd.client, on the caller's side
    DAEMON_UNREACHABLE = "daemon_unreachable"
    DAEMON_ERROR = "daemon_error"
    # agentd's channel adapters, on the chat network's side
    CHAT_NETWORK = "chat_network"
    # Tool results (the recall/remember skills' own names)
    SKILL_INVALID_INPUT = "InvalidInput"
    SKILL_EXECUTION_FAILED = "ExecutionFailed"
    # Tools of MCP servers personas use
    MCP_UNAVAILABLE = "mcp_unavailable"
    MCP_TIMEOUT = "mcp_timeout"
    MCP_TOOL_ERROR = "mcp_tool_error"
    # Tool policies and approvals
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVAL_DENIED = "approval_denied"
    ALREADY_DECIDED = "already_decided"


@dataclass(frozen=True)
class CodeInfo:
    """What one code means, and the HTTP status it is answered with."""

    status: int
    meaning: str


#: Every code, its HTTP status and its meaning (the README's and the OpenAPI schema's table).
CATALOGUE: dict[ErrorCode, CodeInfo] = {
    ErrorCode.INVALID_INPUT: CodeInfo(
        422, "a field is missing, unknown, of the wrong type or out of range; `field` names it"
    ),
    ErrorCode.MALFORMED_JSON: CodeInfo(400, "the body is not valid JSON"),
    ErrorCode.BAD_REQUEST: CodeInfo(400, "the request is malformed (a header, the Content-Length)"),
    ErrorCode.UNAUTHORIZED: CodeInfo(401, "no API key, or a key that is not valid"),
    ErrorCode.FORBIDDEN: CodeInfo(403, "the key is valid but its role may not do this"),
    ErrorCode.NOT_FOUND: CodeInfo(404, "an unknown persona, memory, message, channel or path"),
    ErrorCode.METHOD_NOT_ALLOWED: CodeInfo(405, "the path does not take this method (see the Allow header)"),
    ErrorCode.BODY_TOO_LARGE: CodeInfo(413, "the body is larger than [daemon] max_body_bytes"),
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: CodeInfo(415, "the body is not application/json"),
    ErrorCode.HOST_NOT_ALLOWED: CodeInfo(421, "the Host header names a host this daemon does not serve"),
    ErrorCode.CONFIG_ERROR: CodeInfo(500, "the configuration is invalid (file, key and reason)"),
    ErrorCode.SHUTTING_DOWN: CodeInfo(503, "the daemon is stopping; accepted messages are answered after restart"),
    ErrorCode.OVERLOADED: CodeInfo(
        429,
        "the daemon, or the channel, has as many messages waiting for a reply as it may; nothing was stored: "
        "post again after Retry-After seconds",
    ),
    ErrorCode.STORE_ERROR: CodeInfo(503, "the database cannot be opened or written"),
    ErrorCode.EMBEDDING_MISMATCH: CodeInfo(409, "the store's vectors come from another embedding model"),
    ErrorCode.INTERNAL_ERROR: CodeInfo(500, "a bug; the daemon's log has the details"),
    ErrorCode.EMBEDDER_NOT_CONFIGURED: CodeInfo(
        503, 'no embedding model is configured ([embedding] provider = "none")'
    ),
    ErrorCode.EMBEDDER_UNAVAILABLE: CodeInfo(503, "the embedding model failed or could not be reached"),
    ErrorCode.EMBEDDER_TIMEOUT: CodeInfo(504, "the embedding model did not answer in time"),
    ErrorCode.EMBEDDER_BAD_OUTPUT: CodeInfo(
        502, "the embedding model answered with something that is not a usable vector"
    ),
    ErrorCode.CONTEXT_OVERFLOW: CodeInfo(
        422, "the system prompt and the message do not fit the model's context window"
    ),
    ErrorCode.BUDGET_EXCEEDED: CodeInfo(
        429,
        "a spend cap (a persona's max_tokens_per_day or max_cost_usd_per_day, or [users] max_tokens_per_day) "
        "is reached for today: the model was not called; `cap` names it and `resets_at` says when it resets "
        "(00:00 UTC)",
    ),
    ErrorCode.INTERRUPTED: CodeInfo(
        503, "the daemon stopped during the reply; what was streamed is stored as interrupted"
    ),
    ErrorCode.PERSONA_UNHEALTHY: CodeInfo(503, "this persona's actor in this channel crashed too often"),
    ErrorCode.REPLY_TIMEOUT: CodeInfo(504, "no reply arrived within the caller's wait"),
    ErrorCode.FEED_OVERFLOW: CodeInfo(503, "an event-stream reader fell too far behind; reconnect with Last-Event-ID"),
    ErrorCode.TOO_MANY_FOLLOWERS: CodeInfo(
        429, "the channel, or the caller's key, has as many event streams open as it may; close one"
    ),
    ErrorCode.LLM_ERROR: CodeInfo(502, "the chat model failed"),
    ErrorCode.LLM_AUTH: CodeInfo(502, "the chat model's credentials are missing or were rejected"),
    ErrorCode.LLM_TIMEOUT: CodeInfo(504, "the chat model did not answer in time"),
    ErrorCode.LLM_RATE_LIMITED: CodeInfo(503, "the chat model's provider rate-limited every try"),
    ErrorCode.LLM_BAD_REQUEST: CodeInfo(502, "the chat model's provider refused the request"),
    ErrorCode.LLM_UNREACHABLE: CodeInfo(502, "the chat model's server refused or dropped the connection"),
    ErrorCode.LLM_HTTP_ERROR: CodeInfo(502, "the chat model's server answered with an HTTP error"),
    ErrorCode.LLM_TRUNCATED: CodeInfo(502, "the chat model's stream ended before the reply was finished"),
    ErrorCode.LLM_MALFORMED: CodeInfo(502, "the chat model's answer could not be read"),
    ErrorCode.DAEMON_UNREACHABLE: CodeInfo(503, "agentd.client could not reach the daemon (raised by the client)"),
    ErrorCode.DAEMON_ERROR: CodeInfo(
        502, "agentd.client got an error answer; its remote_code says which (raised by the client)"
    ),
    ErrorCode.CHAT_NETWORK: CodeInfo(
        502, "a channel adapter's chat network failed or refused (raised by the adapter, never by the daemon)"
    ),
    ErrorCode.SKILL_INVALID_INPUT: CodeInfo(422, "a tool was called with invalid arguments (tool results only)"),
    ErrorCode.SKILL_EXECUTION_FAILED: CodeInfo(500, "a tool could not do its work (tool results only)"),
    ErrorCode.MCP_UNAVAILABLE: CodeInfo(
        503, "an MCP server ([mcp.servers.NAME]) could not be started or reached, or died (tool results only)"
    ),
    ErrorCode.MCP_TIMEOUT: CodeInfo(504, "an MCP server's tool did not answer in time (tool results only)"),
    ErrorCode.MCP_TOOL_ERROR: CodeInfo(502, "an MCP server's tool answered with an error (tool results only)"),
    ErrorCode.AWAITING_APPROVAL: CodeInfo(
        202,
        "the turn waits for an owner's approval of a tool call (or behind one in its channel); the reply "
        "follows the decision",
    ),
    ErrorCode.APPROVAL_DENIED: CodeInfo(
        403, "an owner denied the tool call, or nobody decided in time (tool results only)"
    ),
    ErrorCode.ALREADY_DECIDED: CodeInfo(409, "the approval was decided already (each is decided once)"),
}


def http_status(code: ErrorCode) -> int:
    """The HTTP status ``code`` is answered with."""
    return CATALOGUE[code].status


class AgentdError(Exception):
    """Base class of every error agentd raises on purpose."""

    code: ClassVar[ErrorCode] = ErrorCode.INTERNAL_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(AgentdError):
    """A configuration file or override is invalid: names the file, key and reason."""

    code = ErrorCode.CONFIG_ERROR

    def __init__(self, source: str, key: str, reason: str) -> None:
        self.source = source
        self.key = key
        self.reason = reason
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {reason}")


class InvalidInput(AgentdError):
    """A caller-supplied value is invalid; ``field`` names it."""

    code = ErrorCode.INVALID_INPUT

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class NotFound(AgentdError):
    """Something named by the caller does not exist."""

    code = ErrorCode.NOT_FOUND

    def __init__(self, kind: str, name: object, hint: str = "") -> None:
        self.kind = kind
        self.name = name
        msg = f"unknown {kind} {name!r}"
        super().__init__(f"{msg}; {hint}" if hint else msg)


class Forbidden(AgentdError):
    """The caller is known, but its role may not do this."""

    code = ErrorCode.FORBIDDEN


class UnauthorizedCaller(AgentdError):
    """No API key, or one that is not valid (or was revoked)."""

    code = ErrorCode.UNAUTHORIZED


class AlreadyDecided(AgentdError):
    """An approval was decided already: each is decided once, by whoever decides first."""

    code = ErrorCode.ALREADY_DECIDED


class ShuttingDown(AgentdError):
    """The daemon no longer accepts new work."""

    code = ErrorCode.SHUTTING_DOWN


class ChatNetworkError(AgentdError):
    """A channel adapter's chat network (a Matrix homeserver, an IRC server) failed."""

    code = ErrorCode.CHAT_NETWORK


class NetworkUnavailable(ChatNetworkError):
    """The chat network cannot be reached now (down, restarting, timed out): try again later."""


class NetworkRefused(ChatNetworkError):
    """The chat network refused (a login, joining a room, sending an event): retrying will not help."""


class TooManyFollowers(AgentdError):
    """A channel, or a key, already has as many event streams open as ``[daemon]`` allows."""

    code = ErrorCode.TOO_MANY_FOLLOWERS


class Overloaded(AgentdError):
    """As many messages are accepted and unanswered as the daemon (or the channel) allows; nothing was
    stored. ``retry_after``: seconds until there is likely room again (sent as ``Retry-After``)."""

    code = ErrorCode.OVERLOADED

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StoreError(AgentdError):
    """The database cannot be opened, migrated or written."""

    code = ErrorCode.STORE_ERROR


class AlreadyAnswered(StoreError):
    """A complete reply to this user message is stored already (another process answered it first)."""

    def __init__(self, user_message_id: int) -> None:
        self.user_message_id = user_message_id
        super().__init__(f"message {user_message_id} already has a complete reply")


class EmbeddingMismatch(StoreError):
    """The store holds vectors of one embedding model and another is configured."""

    code = ErrorCode.EMBEDDING_MISMATCH

    def __init__(self, stored: str, stored_dim: int, configured: str, configured_dim: int) -> None:
        self.stored = stored
        self.configured = configured
        super().__init__(
            f"the memory store was built with embedding model {stored!r} ({stored_dim}-d) "
            f"but {configured!r} ({configured_dim}-d) is configured; vectors of two models "
            "are never mixed: run `agentd memory reembed` to rebuild every vector with the "
            "configured model, or configure the stored one again"
        )


class EmbedderError(AgentdError):
    """The embedding model failed or could not be reached."""

    code = ErrorCode.EMBEDDER_UNAVAILABLE


class EmbedderNotConfigured(EmbedderError):
    """No embedding model is configured."""

    code = ErrorCode.EMBEDDER_NOT_CONFIGURED


class EmbedderTimeout(EmbedderError):
    """The embedding model did not answer in time."""

    code = ErrorCode.EMBEDDER_TIMEOUT


class EmbedderBadOutput(EmbedderError):
    """The embedding model answered with something that is not a finite unit vector of the right size."""

    code = ErrorCode.EMBEDDER_BAD_OUTPUT


class ContextOverflow(AgentdError):
    """The prompt's fixed parts (system prompt + current message) exceed the model's window."""

    code = ErrorCode.CONTEXT_OVERFLOW


class BudgetExceeded(AgentdError):
    """A turn (or an extraction call) would spend past a cap: the model is not called.

    ``cap`` names the cap (``persona:NAME:max_tokens_per_day``, ``persona:NAME:max_cost_usd_per_day``
    or ``user:ID:max_tokens_per_day``); ``resets_at`` is when it resets (the next 00:00 UTC).
    """

    code = ErrorCode.BUDGET_EXCEEDED

    def __init__(self, message: str, cap: str, resets_at: str) -> None:
        super().__init__(message)
        self.cap = cap
        self.resets_at = resets_at


class TurnError(AgentdError):
    """A turn run on a caller's behalf (the MCP ``chat`` tool) ended with an ``error`` event;
    ``code`` is the event's, and ``cap`` and ``resets_at`` too when a spend cap refused it."""

    def __init__(self, code: ErrorCode, message: str, cap: str | None = None, resets_at: str | None = None) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]  # the event's own code, not the class's
        self.cap = cap
        self.resets_at = resets_at


class LLMError(AgentdError):
    """The chat model failed."""

    code = ErrorCode.LLM_ERROR


class LLMAuthError(LLMError):
    """The model's credentials are missing or were rejected."""

    code = ErrorCode.LLM_AUTH


class LLMTimeout(LLMError):
    """The model did not answer in time."""

    code = ErrorCode.LLM_TIMEOUT


class LLMRateLimited(LLMError):
    """The provider rate-limited the request (on every try)."""

    code = ErrorCode.LLM_RATE_LIMITED


class LLMBadRequest(LLMError):
    """The provider refused the request as invalid."""

    code = ErrorCode.LLM_BAD_REQUEST


class LLMUnreachable(LLMError):
    """The model's server refused or dropped the connection before answering."""

    code = ErrorCode.LLM_UNREACHABLE


class LLMHttpError(LLMError):
    """The model's server answered with an HTTP error status; ``status`` is it."""

    code = ErrorCode.LLM_HTTP_ERROR

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class LLMTruncated(LLMError):
    """The stream ended (connection closed) before the model said it had finished."""

    code = ErrorCode.LLM_TRUNCATED


class LLMMalformed(LLMError):
    """The model's answer could not be read (not JSON, not the expected shape)."""

    code = ErrorCode.LLM_MALFORMED


class SkillError(AgentdError):
    """A skill (tool) call failed."""

    code = ErrorCode.SKILL_EXECUTION_FAILED


class SkillInvalidInput(SkillError):
    """The arguments of a tool call are invalid (the recall/remember skills' ``InvalidInput``)."""

    code = ErrorCode.SKILL_INVALID_INPUT


class SkillExecutionFailed(SkillError):
    """A tool could not do its work (the recall/remember skills' ``ExecutionFailed``)."""

    code = ErrorCode.SKILL_EXECUTION_FAILED


class McpServerError(SkillExecutionFailed):
    """A tool of an MCP server (``[mcp.servers.NAME]``) failed; ``server`` names it."""

    code = ErrorCode.MCP_UNAVAILABLE

    def __init__(self, server: str, message: str) -> None:
        self.server = server
        super().__init__(f"MCP server {server!r}: {message}")


class McpUnavailable(McpServerError):
    """The MCP server could not be started or reached, or it died (it is started again with backoff)."""

    code = ErrorCode.MCP_UNAVAILABLE


class McpTimeout(McpServerError):
    """The MCP server did not answer in time (``timeout_seconds``)."""

    code = ErrorCode.MCP_TIMEOUT


class McpToolError(McpServerError):
    """The MCP server answered the tool call with an error."""

    code = ErrorCode.MCP_TOOL_ERROR
