"""``agentd post``: post to a running daemon's channel and print the reply."""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Iterator
from typing import Any

import click
import httpx

from agentd._exceptions import ErrorCode
from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import err, print_json


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str, str | None]]:
    """``(event, data, id)`` for each server-sent event in ``lines``."""
    event, data, event_id = "message", list[str](), None
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data), event_id
            event, data, event_id = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                event_id = value


def _fail(message: str, status: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(status)


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()["error"]
        return f"{body['message']} ({response.status_code} {body['code']})"
    except (ValueError, KeyError, TypeError):
        return f"{response.status_code} {response.text[:200]}"


def _login() -> str:
    try:
        return getpass.getuser() or "local"
    except (KeyError, OSError):
        return "local"


@click.command()
@click.argument("channel")
@click.argument("text")
@click.option("--persona", "-p", help="Who answers (default: the persona bound to the channel).")
@click.option("--user", "-u", help="Who you are (default: your login name).")
@click.option("--url", envvar="AGENTD_URL", help="The daemon (default: http://[daemon] host:port, or $AGENTD_URL).")
@click.option(
    "--timeout", type=click.FloatRange(min=0.1), default=300.0, show_default=True, help="Seconds to wait for the reply."
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
    as_json: bool,
) -> None:
    """Post TEXT to CHANNEL on a running daemon and print the persona's reply.

    The message goes through the channel adapter API (as any adapter's would):
    it is stored, answered by the channel's persona, and the reply is read from
    the channel's event stream (streamed as it is written when possible).
    """
    cfg = app.config.daemon
    base = (url or f"http://{'localhost' if cfg.host in ('0.0.0.0', '::') else cfg.host}:{cfg.port}").rstrip("/")
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    body: dict[str, Any] = {"user": user or _login(), "text": text}
    if persona:
        body["persona"] = persona
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=httpx.Timeout(30.0, read=timeout)) as client:
            posted = client.post(f"/v1/channels/{channel}/messages", json=body)
            if posted.status_code != 202:
                _fail(_error_text(posted), 2 if 400 <= posted.status_code < 500 else 1)
            message_id = int(posted.json()["id"])
            reply = _await_reply(client, channel, message_id, as_json)
    except httpx.TransportError as exc:
        _fail(f"cannot reach agentd at {base} ({exc.__class__.__name__}): is `agentd serve` running?")
    if reply is None:
        _fail("the stream ended before the reply arrived")


def _await_reply(client: httpx.Client, channel: str, message_id: int, as_json: bool) -> dict[str, Any] | None:
    """Follow the channel from our message on; print the reply; return it (or exit on an error event)."""
    streaming = False
    with client.stream("GET", f"/v1/channels/{channel}/events", headers={"Last-Event-ID": str(message_id)}) as events:
        if events.status_code != 200:
            events.read()
            _fail(_error_text(events))
        for name, data, _id in sse_events(events.iter_lines()):
            payload = json.loads(data) if data else {}
            mine = payload.get("user_message_id") == message_id
            if name == "memory_context" and mine:
                streaming = not as_json
                if payload.get("memories"):
                    err.print(f"[dim]recalled {len(payload['memories'])} memories[/]")
            elif name == "token_delta" and mine and streaming:
                sys.stdout.write(payload.get("text", ""))
                sys.stdout.flush()
            elif name == "message" and payload.get("role") == "assistant" and payload.get("reply_to") == message_id:
                if as_json:
                    print_json(payload)
                else:
                    sys.stdout.write("\n" if streaming else payload["content"] + "\n")
                    sys.stdout.flush()
                if payload.get("status") == "interrupted":
                    _fail("the reply was interrupted (the daemon stopped)")
                return payload
            elif name == "error" and (
                mine or payload.get("code") in (ErrorCode.SHUTTING_DOWN, ErrorCode.FEED_OVERFLOW)
            ):
                if streaming:
                    sys.stdout.write("\n")
                _fail(f"{payload.get('message', 'error')} ({payload.get('code')})")
    return None
