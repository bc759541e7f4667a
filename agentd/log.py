"""structlog setup: one call at start, events not sentences, to stderr."""

from __future__ import annotations

import logging
import sys

import structlog

from agentd.config import LoggingConfig


def configure(config: LoggingConfig) -> None:
    """Route structlog and stdlib logging to stderr at ``config.level``."""
    level = getattr(logging, config.level.upper())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if config.format == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(
        level=max(level, logging.WARNING), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("LiteLLM", "litellm", "httpx", "pykka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
