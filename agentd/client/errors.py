"""What :mod:`agentd.client` raises: the daemon's own errors, and not reaching it."""

from __future__ import annotations

from typing import Any

import httpx

from agentd._exceptions import AgentdError, ErrorCode


class ApiError(AgentdError):
    """The daemon answered with an error: ``status``, and its ``remote_code``, ``field`` and ``message``."""

    code = ErrorCode.DAEMON_ERROR

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
    """The :class:`ApiError` for an error response whose body has been read."""
    retry_after = _seconds(response.headers.get("retry-after"))
    try:
        error: Any = httpx.Response(200, content=body).json()["error"]
        code, message = str(error["code"]), str(error["message"])
        return ApiError(response.status_code, code, message, error.get("field"), retry_after)
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace")[:200]
        return ApiError(response.status_code, "http_error", text or response.reason_phrase, None, retry_after)


def _seconds(value: str | None) -> float | None:
    """A ``Retry-After`` given in seconds (an HTTP date is not something agentd sends)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
