"""structlog setup: one call at start, events not sentences, to stderr.

``[logging] format = "auto"`` (the default) writes JSON lines when stderr is not a
terminal (a service manager, a container, a pipe into a log shipper) and a
readable console line when a person is watching. Records of the standard
``logging`` module (uvicorn, libraries) go through the same renderer, so a JSON
log stays all JSON.

structlog is imported by the first module that logs (through :func:`get_logger`),
not by :func:`configure`: importing it costs a tenth of a second (it brings asyncio
and rich's tracebacks), which commands that never log through it (``agentd memory
list``) do not pay. Whichever comes second, :func:`configure` or the first
:func:`get_logger`, sets structlog up, so no event is ever rendered unconfigured.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from agentd.config import LoggingConfig

if TYPE_CHECKING:
    import structlog

_lock = threading.Lock()
#: The configuration :func:`configure` was given while structlog was not imported yet.
_pending: tuple[int, bool] | None = None


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure` installs (and replaces when called again)."""


class _Formatter(logging.Formatter):
    """Renders records of the logging module like agentd's own events; structlog's formatter is
    made for the first record (imported then)."""

    def __init__(self, as_json: bool) -> None:
        super().__init__()
        self._as_json = as_json
        self._inner: logging.Formatter | None = None

    def format(self, record: logging.LogRecord) -> str:
        if self._inner is None:
            import structlog

            self._inner = structlog.stdlib.ProcessorFormatter(
                foreign_pre_chain=[*_shared(), structlog.stdlib.add_logger_name],
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    _renderer(self._as_json),
                ],
            )
        return self._inner.format(record)


class _CurrentStderr:
    """``sys.stderr`` as it is when a line is written, not as it was when logging was set up: a
    program (or a test harness) that replaces ``sys.stderr`` later still gets agentd's lines."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_STDERR: Any = _CurrentStderr()


def renders_json(config: LoggingConfig, stream: TextIO | None = None) -> bool:
    """True when logs are written as JSON lines (``auto``: when ``stream`` is not a terminal)."""
    if config.format != "auto":
        return config.format == "json"
    stream = sys.stderr if stream is None else stream
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream: machines read it
        return True


def configure(config: LoggingConfig) -> None:
    """Route structlog and stdlib logging to stderr at ``config.level``."""
    global _pending
    level = getattr(logging, config.level.upper())
    as_json = renders_json(config)
    with _lock:
        if "structlog" in sys.modules:
            _set_up(level, as_json)
            _pending = None
        else:
            _pending = (level, as_json)
    # Records of the logging module, rendered like agentd's own events (the logger's name kept).
    handler = _Handler(_STDERR)
    handler.setFormatter(_Formatter(as_json))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))
    for noisy in ("LiteLLM", "litellm", "httpx", "pykka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def get_logger(name: str) -> Any:
    """structlog's logger called ``name``, with structlog set up as :func:`configure` was told."""
    global _pending
    import structlog

    with _lock:
        if _pending is not None:
            _set_up(*_pending)
            _pending = None
    return structlog.get_logger(name)


def log_deprecations(messages: Sequence[str]) -> None:
    """Log each deprecated key that was read (:class:`agentd.config.ConfigDeprecationWarning`'s
    message: the file, the old key, the new one) as a ``config_deprecated`` event, on every load."""
    if messages:
        log = get_logger("agentd.config")
        for message in messages:
            log.warning("config_deprecated", detail=message)


def _shared() -> list[structlog.typing.Processor]:
    import structlog

    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def _renderer(as_json: bool) -> structlog.typing.Processor:
    import structlog

    return structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)


def _set_up(level: int, as_json: bool) -> None:
    import structlog

    structlog.configure(
        processors=[*_shared(), structlog.processors.format_exc_info, _renderer(as_json)],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # One write per line (PrintLogger writes the line, then its newline): the daemon's
        # worker processes write to the same stderr, and their lines must not interleave.
        logger_factory=structlog.WriteLoggerFactory(file=_STDERR),
        cache_logger_on_first_use=False,
    )
