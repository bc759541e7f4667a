"""What must hold before the daemon starts: checked by ``agentd serve`` (:class:`DaemonServer`)
and by ``agentd doctor`` alike, so that doctor fails exactly where serve would, with the same
message. Light to import: no FastAPI, no uvicorn."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from agentd._exceptions import ConfigError

if TYPE_CHECKING:
    from agentd.app import App


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str) -> None:
    """Refuse to listen beyond loopback without an API key."""
    if not is_loopback(host) and not api_key:
        raise ConfigError(
            "daemon.host",
            "",
            f"refusing to listen on {host!r} (beyond loopback) without an API key: set [daemon] api_key "
            "(or AGENTD_DAEMON__API_KEY), or bind to 127.0.0.1",
        )


def check_startup(app: App, host: str) -> None:
    """Raise the :class:`ConfigError` that stops ``agentd serve`` on ``host``: listening beyond
    loopback without an API key, or a channel bound to a persona there is none of."""
    cfg = app.config
    check_bind(host, cfg.daemon.api_key)
    known = set(app.personas)
    for channel, entry in cfg.channels.items():
        unknown = [name for name in entry.personas if name not in known]
        if unknown:  # fail at start, before listening, naming the key
            raise ConfigError(
                cfg.source,
                f"channels.{channel}.personas",
                f"unknown persona {unknown[0]!r}; known: {', '.join(app.personas) or 'none'}",
            )
