"""``agentd post``: post to a running daemon's channel and print the reply (through :mod:`agentd.client`)."""

from __future__ import annotations

import sys
import threading
from typing import Any, NoReturn

import click

from agentd._exceptions import ErrorCode
from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import err, print_json
from agentd.client import AgentdClient, ApiError, DaemonUnreachable


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
    "each retry after its Retry-After) or refuses the connection; 0: fail at once.",
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
            posted = client.post(channel, user or app.config.default_user(), text, persona=persona)
            reply = _await_reply(client, channel, posted.id, as_json, timeout)
    except ApiError as exc:
        _fail(str(exc), 2 if 400 <= exc.status < 500 else 1)
    except DaemonUnreachable as exc:
        _fail(str(exc))
    if reply is None:
        _fail("the stream ended before the reply arrived")


def _await_reply(
    client: AgentdClient, channel: str, message_id: int, as_json: bool, timeout: float
) -> dict[str, Any] | None:
    """Follow the channel from our message on; print the reply; return it (or exit on an error event)."""
    streaming = False
    feed = client.follow(channel, last_event_id=str(message_id), reconnect=False)
    timer = threading.Timer(timeout, feed.close)
    timer.start()
    try:
        for ev in feed:
            payload = ev.data
            mine = payload.get("user_message_id") == message_id
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
        timer.cancel()
    if feed.closed:
        _fail(f"no reply within {timeout:g} s")
    return None
