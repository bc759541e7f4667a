"""structlog setup: one call at start, events not sentences, to stderr.

``[logging] format = "auto"`` (the default) writes JSON lines when stderr is not a
terminal (a service manager, a container, a pipe into a log shipper) and a
readable console line when a person is watching. Records of the standard
``logging`` module (uvicorn, libraries) go through the same renderer, so a JSON
log stays all JSON.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

from agentd.config import LoggingConfig


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure` installs (and replaces when called again)."""


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
    level = getattr(logging, config.level.upper())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if renders_json(config) else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Records of the logging module, rendered like agentd's own events (the logger's name kept).
    handler = _Handler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))
    for noisy in ("LiteLLM", "litellm", "httpx", "pykka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
