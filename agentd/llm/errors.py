"""litellm's errors, mapped once to agentd's, and what a retry needs to know about them.

litellm wraps the provider SDK's exceptions, which wrap httpx's, which wrap the
socket's; the cause that matters (a refused connection, a body that is not
JSON) is found by walking that chain (:func:`caused_by`), not by reading
messages. A refused or dropped connection is :class:`~agentd.LLMUnreachable`
whatever class litellm gave it (it reports one as an HTTP 500).

Each error says, in plain words, which model at which address, what happened
(refused, timed out, unauthorised, unknown model, ...) and what to try; litellm's
own text stays in the logs. Every way in (the CLI, the API, the OpenAI endpoint,
MCP, the web page) shows this one message.
"""

from __future__ import annotations

import json
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
from agentd.llm import litellm_module
from agentd.timing.backoff import retry_after_seconds

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


def where(model: str, api_base: str | None) -> str:
    """``model 'NAME' at ADDRESS``: how an error names the model it is about."""
    address = api_base or "its provider's default address"
    return f"model {model!r} at {address}"


def _unknown_model(exc: Exception) -> bool:
    """litellm could not tell the provider, or the server said it has no such model."""
    litellm = litellm_module()
    if isinstance(exc, litellm.NotFoundError):
        return True
    text = str(getattr(exc, "message", None) or exc).lower()
    return "llm provider not provided" in text or "model_not_found" in text or "does not exist" in text


def map_error(
    exc: Exception,
    model: str,
    api_base: str | None = None,
    timeout: float | None = None,
    api_key_env: str | None = None,
) -> LLMError:
    """The agentd error for an exception litellm raised while calling ``model`` at ``api_base``
    (``timeout``: the seconds of silence it was given; ``api_key_env``: where its key comes from)."""
    if isinstance(exc, LLMError):
        return exc
    litellm = litellm_module()
    at = where(model, api_base)
    if isinstance(exc, litellm.AuthenticationError):
        key = api_key_env or "the provider's API key variable"
        return LLMAuthError(f"{at} refused the credentials (unauthorised): check the key in {key}.")
    if isinstance(exc, litellm.Timeout) or caused_by(exc, TimeoutError):
        waited = f"for {timeout:g} s " if timeout else ""
        return LLMTimeout(
            f"{at} sent nothing {waited}(timed out): is the server overloaded or still loading the model? "
            "For a slow model, raise model_timeout_seconds in the persona."
        )
    if isinstance(exc, litellm.RateLimitError):
        return LLMRateLimited(f"{at} is rate-limiting (too many requests): wait and try again, or lower the rate.")
    if _unknown_model(exc):
        return LLMBadRequest(
            f"{at} does not know this model (unknown model): check the persona's model name; for an "
            "OpenAI-compatible server, write openai/NAME and set api_base."
        )
    if isinstance(exc, litellm.BadRequestError):
        return LLMBadRequest(f"{at} refused the request (bad request): {getattr(exc, 'message', None) or exc}")
    if caused_by(exc, json.JSONDecodeError):
        return LLMMalformed(f"{at}: the answer is not valid JSON ({exc.__class__.__name__})")
    if isinstance(exc, litellm.APIConnectionError) or caused_by(exc, *_connection_errors()):
        return LLMUnreachable(
            f"{at} could not be reached (connection refused or dropped): is the model server running there? "
            "Check the persona's api_base."
        )
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return LLMHttpError(f"{at} answered HTTP {status}: {getattr(exc, 'message', None) or exc}", status)
    return LLMError(f"{at} failed: {getattr(exc, 'message', None) or exc}")


def is_transient(error: LLMError, streamed: bool) -> bool:
    """Worth another try: a rate limit, an overloaded or unreachable server — and a stream cut
    before anything of it was streamed (``streamed`` False). Not a timeout: a model silent for the
    whole timeout is reported then (within one timeout of its last sign of life), not waited for
    again and again."""
    if isinstance(error, LLMRateLimited | LLMUnreachable):
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
