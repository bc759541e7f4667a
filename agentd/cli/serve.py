"""``agentd serve``: the daemon."""

from __future__ import annotations

import gc
import os
import sys
import threading
from typing import TYPE_CHECKING

import click

from agentd.cli.main import pass_app

if TYPE_CHECKING:
    import socket

    from agentd.app import App


def _start(app: App, what: str) -> threading.Thread:
    """Run ``app.preload_<what>()`` on a thread; a failure is logged (the first request that
    needs the part reports it properly). Not a daemon thread: a model half-loaded by native
    code must not be cut off at exit."""

    def preload() -> None:
        from agentd.observe.log import get_logger

        log = get_logger("agentd.serve")
        try:
            getattr(app, f"preload_{what}")()
        except Exception as exc:
            log.warning("preload_failed", part=what, error=f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=preload, name=f"agentd-preload-{what}")
    thread.start()
    return thread


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
    if app.config.telemetry.metrics:
        from agentd.observe import metrics

        # Before any worker starts: every process of this daemon counts in this fresh directory.
        metrics.use_fresh_directory()
    try:
        _serve(app, host, sock)
    finally:
        if app.config.telemetry.metrics:
            metrics.remove_directory()
    _exit_past_stuck_threads()


def _serve(app: App, host: str, sock: socket.socket) -> None:
    """Start the workers' fork server, build the daemon, and serve until it stops."""
    workers = app.config.runtime.worker_count(app.store.backend)
    if workers:  # its imports run on another core while this process loads the rest
        from agentd.runtime.scaleout.workers import start_fork_server

        start_fork_server(app.turn_modules())
    # The embedding model and the tokenizers load (native code, mostly) while the web
    # framework is imported and the runtime built: the daemon answers its first request warm.
    # With worker processes, each loads its own; this process loads its own on first use
    # (memory search, budgets).
    models = _start(app, "models" if not workers else "tokenizers")
    try:
        from agentd.api.server import DaemonServer
        from agentd.observe import tracing

        tracing.configure(app.config.telemetry, app.config.where)  # [telemetry] otlp_endpoint, else nothing

        server = DaemonServer(app, host, int(sock.getsockname()[1]), sock=sock, workers=workers)
    except BaseException:
        sock.close()
        models.join()
        raise
    models.join()
    # Everything loaded so far lives as long as the process: keep it out of the collector's
    # full passes (shorter pauses while serving, and a faster exit).
    gc.freeze()
    server.handle_signals()  # a SIGTERM sent as soon as the line below is read stops it gracefully
    # One line on stdout that scripts (and the tests) can wait for.
    click.echo(f"agentd listening on {server.url} (OpenAPI at {server.url}/docs; config: {app.config.where})", nl=True)
    # litellm takes seconds to import (Python, all of it): after the daemon answers; the first
    # reply from a real model waits for the import if it comes sooner. Worker processes, which
    # call the models, import it themselves.
    llm = None if workers else _start(app, "litellm")
    try:
        server.run()
    finally:
        if llm is not None:
            llm.join()
        tracing.shutdown()  # the spans still queued are sent (within its flush timeout)


def _exit_past_stuck_threads() -> None:
    """End the process now that the daemon has stopped and closed its store, without the
    interpreter's finalization when other threads are still alive: a thread stuck in a
    dependency that never answered (a hung embedder) can hold the import lock that a library's
    ``__del__`` then waits for during finalization, and the process would never exit."""
    if any(t is not threading.main_thread() and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
