"""``agentd serve``: the daemon."""

from __future__ import annotations

import gc

import click

from agentd.app import App
from agentd.cli.main import pass_app


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
    from agentd.api.guard import check_bind

    cfg = app.config.daemon
    host = host or cfg.host
    check_bind(host, cfg.api_key)  # before loading anything heavy
    from agentd.api.server import DaemonServer

    server = DaemonServer(app, host, cfg.port if port is None else port)
    # Everything loaded so far lives as long as the process: keep it out of the collector's
    # full passes (shorter pauses while serving, and a faster exit).
    gc.freeze()
    # One line on stdout that scripts (and the tests) can wait for.
    click.echo(f"agentd listening on {server.url} (OpenAPI at {server.url}/docs)", nl=True)
    server.run()
