"""``agentd post``: post to a running daemon's channel and print the reply (through :mod:`agentd.client`)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any, NoReturn

import click
import httpx

from agentd._exceptions import ErrorCode
from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import err, print_json
from agentd.cli.waiting import Waiting, model_wait
from agentd.client import AgentdClient, ApiError, DaemonUnreachable
from agentd.client.backoff import Backoff


def _fail(message: str, status: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(status)


def daemon_url(app: App, url: str | None) -> str:
    """``--url``, else the configured ``[daemon]`` host and port."""
    cfg = app.config.daemon
    return (url or f"http://{'localhost' if cfg.host in ('0.0.0.0', '::') else cfg.host}:{cfg.port}").rstrip("/")


@click.command()
@click.argument("channel")
@click.argument("text")
@click.option("--persona", "-p", help="Who answers (default: the persona the text addresses, else the channel's).")
@click.option("--user", "-u", help="Who you are (default: [user] name, else your login name).")
@click.option("--url", envvar="AGENTD_URL", help="The daemon (default: http://[daemon] host:port, or $AGENTD_URL).")
@click.option(
    "--timeout", type=click.FloatRange(min=0.1), default=300.0, show_default=True, help="Seconds to wait for the reply."
)
@click.option(
    "--busy-wait",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds to keep posting again while the daemon is busy (429: nothing was stored; "
    "each retry after its Retry-After); 0: fail at once.",
)
@click.option(
    "--wait",
    "wait_for_daemon",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to wait for a daemon that is not running yet (refuses the connection); 0: say so at once.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the stored reply as JSON.")
@pass_app
def post(
    app: App,
    channel: str,
    text: str,
    persona: str | None,
    user: str | None,
    url: str | None,
    timeout: float,
    busy_wait: float,
    wait_for_daemon: float,
    as_json: bool,
) -> None:
    """Post TEXT to CHANNEL on a running daemon and print the persona's reply.

    The message goes through the channel adapter API (as any adapter's would):
    it is stored, answered by the channel's persona, and the reply is read from
    the channel's event stream (streamed as it is written when possible).
    A busy daemon (429) is asked again after the wait it names, up to --busy-wait
    seconds; the message is stored once.
    """
    base = daemon_url(app, url)
    try:
        with AgentdClient(base, app.config.daemon.api_key or None, busy_patience=busy_wait) as client:
            _reach(client, base, wait_for_daemon)
            posted = client.post(channel, user or app.config.default_user(), text, persona=persona)
            known = app.personas.get(posted.persona) if posted.persona else None
            about = model_wait(known, app.config) if known is not None else f"{posted.persona} is answering"
            reply = _await_reply(client, channel, posted.id, as_json, timeout, about)
    except ApiError as exc:
        _fail(str(exc), 2 if 400 <= exc.status < 500 else 1)
    except DaemonUnreachable as exc:
        _fail(str(exc))
    if reply is None:
        _fail("the stream ended before the reply arrived")


def _reach(client: AgentdClient, base: str, wait: float) -> None:
    """Make sure the daemon answers: one that is not running fails at once, or after ``wait`` seconds of trying."""
    started = time.monotonic()
    backoff = Backoff(first=0.5, cap=5.0)
    with Waiting(f"waiting up to {wait:g} s for agentd at {base}") if wait else contextlib.nullcontext():
        while True:
            try:
                client.health()
                return
            except DaemonUnreachable as exc:
                refused = isinstance(exc.__cause__, httpx.ConnectError)
                pause = backoff.next()
                if not refused or time.monotonic() + pause - started > wait:
                    hint = "start it with `agentd serve`" + ("" if wait else ", or pass --wait SECONDS to wait for it")
                    reason = "connection refused" if refused else exc.__cause__.__class__.__name__
                    _fail(f"agentd is not running at {base} ({reason}): {hint}")
                time.sleep(pause)


def _await_reply(
    client: AgentdClient, channel: str, message_id: int, as_json: bool, timeout: float, about: str
) -> dict[str, Any] | None:
    """Follow the channel from our message on; print the reply; return it (or exit on an error event)."""
    streaming = False
    feed = client.follow(channel, last_event_id=str(message_id), reconnect=False)
    timer = threading.Timer(timeout, feed.close)
    timer.start()
    waiting = Waiting(
        f"message {message_id} posted to #{channel} at {client.url}; {about}; this command waits up to {timeout:g} s"
    )
    waiting.__enter__()
    try:
        for ev in feed:
            payload = ev.data
            mine = payload.get("user_message_id") == message_id
            if mine and ev.event in ("token_delta", "done", "error"):
                waiting.done()
            if ev.event == "memory_context" and mine:
                streaming = not as_json
                if payload.get("memories"):
                    err.print(f"[dim]recalled {len(payload['memories'])} memories[/]")
            elif ev.event == "token_delta" and mine and streaming:
                sys.stdout.write(payload.get("text", ""))
                sys.stdout.flush()
            elif ev.event == "message" and payload.get("role") == "assistant" and payload.get("reply_to") == message_id:
                if as_json:
                    print_json(payload)
                else:
                    sys.stdout.write("\n" if streaming else payload["content"] + "\n")
                    sys.stdout.flush()
                if payload.get("status") == "interrupted":
                    _fail("the reply was interrupted (the daemon stopped)")
                return payload
            elif ev.event == "error" and (
                mine or payload.get("code") in (ErrorCode.SHUTTING_DOWN, ErrorCode.FEED_OVERFLOW)
            ):
                if streaming:
                    sys.stdout.write("\n")
                _fail(f"{payload.get('message', 'error')} ({payload.get('code')})")
    finally:
        waiting.done()
        timer.cancel()
    if feed.closed:
        _fail(f"no reply within {timeout:g} s")
    return None
