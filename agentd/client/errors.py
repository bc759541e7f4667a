"""What :mod:`agentd.client` raises: the daemon's own errors, and not reaching it.

An error the daemon answers raises the subclass of :class:`ApiError` for its code, one per code
of the catalogue (:data:`agentd.ErrorCode`; their meanings: docs/reference/errors.md), so a
caller catches what it can handle::

    try:
        client.post("general", "alice", "hi")
    except BudgetExceededError as exc:      # a spend cap is reached: exc.reason says until when
        ...
    except ApiError as exc:                 # any other answer; exc.remote_code says which
        ...

A code this client does not know (a newer daemon's) raises :class:`ApiError` itself. These are
the daemon's answers as a client sees them; agentd's in-process exceptions of the same names
(``agentd.StoreError``, …) are other classes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx

from agentd._exceptions import AgentdError, ErrorCode
from agentd.timing.backoff import retry_after_seconds


class ApiError(AgentdError):
    """The daemon answered with an error: ``status``, and its ``remote_code``, ``field`` and ``message``."""

    code = ErrorCode.DAEMON_ERROR
    #: The daemon's code a subclass stands for (``None``: :class:`ApiError` itself, any code).
    remote: ClassVar[ErrorCode | None] = None

    def __init__(
        self, status: int, code: str, message: str, field: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{message} ({status} {code})")
        self.status = status
        #: The daemon's code for this error, as it sent it (a value of :class:`~agentd.ErrorCode`
        #: for agentd's own errors, e.g. "not_found", "invalid_input").
        self.remote_code = code
        self.field = field
        self.reason = message
        #: Seconds the daemon asked to wait before trying again (its ``Retry-After``), if it said.
        self.retry_after = retry_after


class DaemonUnreachable(AgentdError):
    """No answer from the daemon (not running, wrong URL, network down, timed out)."""

    code = ErrorCode.DAEMON_UNREACHABLE

    def __init__(self, url: str, cause: Exception) -> None:
        super().__init__(f"cannot reach agentd at {url} ({cause.__class__.__name__}): is `agentd serve` running?")
        self.url = url


def error_from(response: httpx.Response, body: bytes) -> ApiError:
    """The :class:`ApiError` (the subclass for its code) for an error response whose body has been read."""
    retry_after = retry_after_seconds(response.headers.get("retry-after"))
    try:
        error: Any = httpx.Response(200, content=body).json()["error"]
        code, message = str(error["code"]), str(error["message"])
        kind = ERRORS.get(code, ApiError)
        return kind(response.status_code, code, message, error.get("field"), retry_after)
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace")[:200]
        return ApiError(response.status_code, "http_error", text or response.reason_phrase, None, retry_after)


class InvalidInputError(ApiError):
    """The daemon answered ``invalid_input`` (HTTP 422)."""

    remote = ErrorCode.INVALID_INPUT


class MalformedJsonError(ApiError):
    """The daemon answered ``malformed_json`` (HTTP 400)."""

    remote = ErrorCode.MALFORMED_JSON


class BadRequestError(ApiError):
    """The daemon answered ``bad_request`` (HTTP 400)."""

    remote = ErrorCode.BAD_REQUEST


class UnauthorizedError(ApiError):
    """The daemon answered ``unauthorized`` (HTTP 401)."""

    remote = ErrorCode.UNAUTHORIZED


class ForbiddenError(ApiError):
    """The daemon answered ``forbidden`` (HTTP 403)."""

    remote = ErrorCode.FORBIDDEN


class NotFoundError(ApiError):
    """The daemon answered ``not_found`` (HTTP 404)."""

    remote = ErrorCode.NOT_FOUND


class MethodNotAllowedError(ApiError):
    """The daemon answered ``method_not_allowed`` (HTTP 405)."""

    remote = ErrorCode.METHOD_NOT_ALLOWED


class BodyTooLargeError(ApiError):
    """The daemon answered ``body_too_large`` (HTTP 413)."""

    remote = ErrorCode.BODY_TOO_LARGE


class UnsupportedMediaTypeError(ApiError):
    """The daemon answered ``unsupported_media_type`` (HTTP 415)."""

    remote = ErrorCode.UNSUPPORTED_MEDIA_TYPE


class HostNotAllowedError(ApiError):
    """The daemon answered ``host_not_allowed`` (HTTP 421)."""

    remote = ErrorCode.HOST_NOT_ALLOWED


class ConfigError(ApiError):
    """The daemon answered ``config_error`` (HTTP 500)."""

    remote = ErrorCode.CONFIG_ERROR


class ShuttingDownError(ApiError):
    """The daemon answered ``shutting_down`` (HTTP 503)."""

    remote = ErrorCode.SHUTTING_DOWN


class OverloadedError(ApiError):
    """The daemon answered ``overloaded`` (HTTP 429)."""

    remote = ErrorCode.OVERLOADED


class StoreError(ApiError):
    """The daemon answered ``store_error`` (HTTP 503)."""

    remote = ErrorCode.STORE_ERROR


class EmbeddingMismatchError(ApiError):
    """The daemon answered ``embedding_mismatch`` (HTTP 409)."""

    remote = ErrorCode.EMBEDDING_MISMATCH


class InternalError(ApiError):
    """The daemon answered ``internal_error`` (HTTP 500)."""

    remote = ErrorCode.INTERNAL_ERROR


class EmbedderNotConfiguredError(ApiError):
    """The daemon answered ``embedder_not_configured`` (HTTP 503)."""

    remote = ErrorCode.EMBEDDER_NOT_CONFIGURED


class EmbedderUnavailableError(ApiError):
    """The daemon answered ``embedder_unavailable`` (HTTP 503)."""

    remote = ErrorCode.EMBEDDER_UNAVAILABLE


class EmbedderTimeoutError(ApiError):
    """The daemon answered ``embedder_timeout`` (HTTP 504)."""

    remote = ErrorCode.EMBEDDER_TIMEOUT


class EmbedderBadOutputError(ApiError):
    """The daemon answered ``embedder_bad_output`` (HTTP 502)."""

    remote = ErrorCode.EMBEDDER_BAD_OUTPUT


class ContextOverflowError(ApiError):
    """The daemon answered ``context_overflow`` (HTTP 422)."""

    remote = ErrorCode.CONTEXT_OVERFLOW


class BudgetExceededError(ApiError):
    """The daemon answered ``budget_exceeded`` (HTTP 429)."""

    remote = ErrorCode.BUDGET_EXCEEDED


class InterruptedError(ApiError):
    """The daemon answered ``interrupted`` (HTTP 503)."""

    remote = ErrorCode.INTERRUPTED


class PersonaUnhealthyError(ApiError):
    """The daemon answered ``persona_unhealthy`` (HTTP 503)."""

    remote = ErrorCode.PERSONA_UNHEALTHY


class ReplyTimeoutError(ApiError):
    """The daemon answered ``reply_timeout`` (HTTP 504)."""

    remote = ErrorCode.REPLY_TIMEOUT


class FeedOverflowError(ApiError):
    """The daemon answered ``feed_overflow`` (HTTP 503)."""

    remote = ErrorCode.FEED_OVERFLOW


class TooManyFollowersError(ApiError):
    """The daemon answered ``too_many_followers`` (HTTP 429)."""

    remote = ErrorCode.TOO_MANY_FOLLOWERS


class LLMError(ApiError):
    """The daemon answered ``llm_error`` (HTTP 502)."""

    remote = ErrorCode.LLM_ERROR


class LLMAuthError(ApiError):
    """The daemon answered ``llm_auth`` (HTTP 502)."""

    remote = ErrorCode.LLM_AUTH


class LLMTimeoutError(ApiError):
    """The daemon answered ``llm_timeout`` (HTTP 504)."""

    remote = ErrorCode.LLM_TIMEOUT


class LLMRateLimitedError(ApiError):
    """The daemon answered ``llm_rate_limited`` (HTTP 503)."""

    remote = ErrorCode.LLM_RATE_LIMITED


class LLMBadRequestError(ApiError):
    """The daemon answered ``llm_bad_request`` (HTTP 502)."""

    remote = ErrorCode.LLM_BAD_REQUEST


class LLMUnreachableError(ApiError):
    """The daemon answered ``llm_unreachable`` (HTTP 502)."""

    remote = ErrorCode.LLM_UNREACHABLE


class LLMHttpError(ApiError):
    """The daemon answered ``llm_http_error`` (HTTP 502)."""

    remote = ErrorCode.LLM_HTTP_ERROR


class LLMTruncatedError(ApiError):
    """The daemon answered ``llm_truncated`` (HTTP 502)."""

    remote = ErrorCode.LLM_TRUNCATED


class LLMMalformedError(ApiError):
    """The daemon answered ``llm_malformed`` (HTTP 502)."""

    remote = ErrorCode.LLM_MALFORMED


class ChatNetworkError(ApiError):
    """The daemon answered ``chat_network`` (HTTP 502)."""

    remote = ErrorCode.CHAT_NETWORK


class SkillInvalidInputError(ApiError):
    """The daemon answered ``InvalidInput`` (HTTP 422)."""

    remote = ErrorCode.SKILL_INVALID_INPUT


class SkillExecutionFailedError(ApiError):
    """The daemon answered ``ExecutionFailed`` (HTTP 500)."""

    remote = ErrorCode.SKILL_EXECUTION_FAILED


class McpUnavailableError(ApiError):
    """The daemon answered ``mcp_unavailable`` (HTTP 503)."""

    remote = ErrorCode.MCP_UNAVAILABLE


class McpTimeoutError(ApiError):
    """The daemon answered ``mcp_timeout`` (HTTP 504)."""

    remote = ErrorCode.MCP_TIMEOUT


class McpToolError(ApiError):
    """The daemon answered ``mcp_tool_error`` (HTTP 502)."""

    remote = ErrorCode.MCP_TOOL_ERROR


class AwaitingApprovalError(ApiError):
    """The daemon answered ``awaiting_approval`` (HTTP 202)."""

    remote = ErrorCode.AWAITING_APPROVAL


class ApprovalDeniedError(ApiError):
    """The daemon answered ``approval_denied`` (HTTP 403)."""

    remote = ErrorCode.APPROVAL_DENIED


class AlreadyDecidedError(ApiError):
    """The daemon answered ``already_decided`` (HTTP 409)."""

    remote = ErrorCode.ALREADY_DECIDED


#: The class raised for each code the daemon may answer (a code not here: :class:`ApiError`).
ERRORS: dict[str, type[ApiError]] = {
    str(kind.remote): kind for kind in ApiError.__subclasses__() if kind.remote is not None
}

__all__ = [
    "AwaitingApprovalError",
    "ApprovalDeniedError",
    "AlreadyDecidedError",
    "ERRORS",
    "ApiError",
    "DaemonUnreachable",
    "error_from",
    "BadRequestError",
    "BodyTooLargeError",
    "BudgetExceededError",
    "ChatNetworkError",
    "ConfigError",
    "ContextOverflowError",
    "EmbedderBadOutputError",
    "EmbedderNotConfiguredError",
    "EmbedderTimeoutError",
    "EmbedderUnavailableError",
    "EmbeddingMismatchError",
    "FeedOverflowError",
    "ForbiddenError",
    "HostNotAllowedError",
    "InternalError",
    "InterruptedError",
    "InvalidInputError",
    "LLMAuthError",
    "LLMBadRequestError",
    "LLMError",
    "LLMHttpError",
    "LLMMalformedError",
    "LLMRateLimitedError",
    "LLMTimeoutError",
    "LLMTruncatedError",
    "LLMUnreachableError",
    "MalformedJsonError",
    "McpTimeoutError",
    "McpToolError",
    "McpUnavailableError",
    "MethodNotAllowedError",
    "NotFoundError",
    "OverloadedError",
    "PersonaUnhealthyError",
    "ReplyTimeoutError",
    "ShuttingDownError",
    "SkillExecutionFailedError",
    "SkillInvalidInputError",
    "StoreError",
    "TooManyFollowersError",
    "UnauthorizedError",
    "UnsupportedMediaTypeError",
]
