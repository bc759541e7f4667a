"""litellm's errors, mapped once to agentd's, and what a retry needs to know about them.

litellm wraps the provider SDK's exceptions, which wrap httpx's, which wrap the
socket's; the cause that matters (a refused connection, a body that is not
JSON) is found by walking that chain (:func:`caused_by`), not by reading
messages. A refused or dropped connection is :class:`~agentd.LLMUnreachable`
whatever class litellm gave it (it reports one as an HTTP 500).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from datetime import datetime

from agentd._exceptions import (
    LLMAuthError,
    LLMBadRequest,
    LLMError,
    LLMHttpError,
    LLMMalformed,
    LLMRateLimited,
    LLMTimeout,
    LLMTruncated,
    LLMUnreachable,
)
from agentd.backoff import delay, retry_after_seconds
from agentd.llm import litellm_module

#: HTTP statuses worth another try: the server is overloaded or briefly away.
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from (``__cause__``, ``__context__``, litellm's ``original_exception``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        nxt = current.__cause__ or current.__context__
        original = getattr(current, "original_exception", None)
        current = nxt if nxt is not None else original if isinstance(original, BaseException) else None


def caused_by(exc: BaseException, *kinds: type[BaseException]) -> bool:
    """True when ``exc`` or anything in its chain is one of ``kinds``."""
    return any(isinstance(e, kinds) for e in chain(exc))


def _connection_errors() -> tuple[type[BaseException], ...]:
    import httpx

    # httpx's ConnectError (refused, unreachable) and RemoteProtocolError (closed before
    # an answer), and the OS's own: never a timeout, which is its own code.
    return (ConnectionError, httpx.ConnectError, httpx.RemoteProtocolError)


def map_error(exc: Exception, model: str) -> LLMError:
    """The agentd error for an exception litellm raised while calling ``model``."""
    if isinstance(exc, LLMError):
        return exc
    litellm = litellm_module()
    text = f"{model}: {getattr(exc, 'message', None) or exc}"
    if isinstance(exc, litellm.AuthenticationError):
        return LLMAuthError(text)
    if isinstance(exc, litellm.Timeout) or caused_by(exc, TimeoutError):
        return LLMTimeout(text)
    if isinstance(exc, litellm.RateLimitError):
        return LLMRateLimited(text)
    if isinstance(exc, litellm.BadRequestError):
        return LLMBadRequest(text)
    if caused_by(exc, json.JSONDecodeError):
        return LLMMalformed(f"{model}: the answer is not valid JSON ({exc.__class__.__name__})")
    if isinstance(exc, litellm.APIConnectionError) or caused_by(exc, *_connection_errors()):
        return LLMUnreachable(text)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return LLMHttpError(text, status)
    return LLMError(text)


def is_transient(error: LLMError, streamed: bool) -> bool:
    """Worth another try: a rate limit, an overloaded or unreachable server, a timeout — and a
    stream cut before anything of it was streamed (``streamed`` False)."""
    if isinstance(error, LLMRateLimited | LLMUnreachable | LLMTimeout):
        return True
    if isinstance(error, LLMTruncated):
        return not streamed
    return isinstance(error, LLMHttpError) and error.status in TRANSIENT_STATUSES


def _headers(exc: BaseException) -> Mapping[str, str] | None:
    for err in chain(exc):
        found = getattr(err, "litellm_response_headers", None)
        if found:
            return {str(k).lower(): str(v) for k, v in dict(found).items()}
        response = getattr(err, "response", None)
        headers = getattr(response, "headers", None)
        if headers:
            return {str(k).lower(): str(v) for k, v in dict(headers).items()}
    return None


def retry_after(exc: BaseException, now: datetime | None = None) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``; ``Retry-After``: seconds or an HTTP date)."""
    headers = _headers(exc)
    if not headers:
        return None
    if "retry-after-ms" in headers:
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    return retry_after_seconds(headers.get("retry-after"), now)


def backoff(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds before try ``attempt + 1``: ``base * 2**attempt``, capped, with jitter (half to all of it)."""
    return delay(attempt, base, cap, rng=rng)
