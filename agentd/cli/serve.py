"""``agentd serve``: the daemon."""

from __future__ import annotations

import gc
import sys
import threading
from typing import TYPE_CHECKING

import click

from agentd.cli.main import pass_app

if TYPE_CHECKING:
    from agentd.app import App


def _preload(app: App) -> None:
    """Load the embedding model, the tokenizers and litellm (when a persona needs it) while
    the daemon already answers: the first reply need not wait for them."""
    import structlog

    log = structlog.get_logger("agentd.serve")
    try:
        app.preload()
    except Exception as exc:  # the first request that needs the part reports it properly
        log.warning("preload_failed", error=f"{type(exc).__name__}: {exc}")
    else:
        log.info("preloaded")


@click.command()
@click.option(
    "--host", help="Address to listen on (default: [daemon] host, 127.0.0.1). Beyond loopback needs an API key."
)
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default: [daemon] port, 8765; 0: any free port).")
@pass_app
def serve(app: App, host: str | None, port: int | None) -> None:
    """Run the daemon: the HTTP API with server-sent events, on the actor runtime.

    Stops on SIGTERM or Ctrl-C: no new requests, in-flight replies finish within
    [daemon] shutdown_grace_seconds (else are stored as interrupted), messages not
    yet answered are answered after the next start.
    """
    from agentd.api.listen import CannotListen, bind_socket

    cfg = app.config.daemon
    host = host or cfg.host
    # Bind before loading anything heavy: a port in use is reported at once.
    try:
        sock = bind_socket(host, cfg.port if port is None else port)
    except CannotListen as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    try:
        from agentd.api.server import DaemonServer

        server = DaemonServer(app, host, int(sock.getsockname()[1]), sock=sock)
    except BaseException:
        sock.close()
        raise
    # Everything loaded so far lives as long as the process: keep it out of the collector's
    # full passes (shorter pauses while serving, and a faster exit).
    gc.freeze()
    # One line on stdout that scripts (and the tests) can wait for.
    click.echo(f"agentd listening on {server.url} (OpenAPI at {server.url}/docs)", nl=True)
    threading.Thread(target=_preload, args=(app,), name="agentd-preload", daemon=True).start()
    server.run()
