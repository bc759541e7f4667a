#!/usr/bin/env python3
"""A channel adapter that bridges a terminal to a running agentd.

Each line typed (or piped) on stdin is posted to a channel; the persona's replies
are read from the channel's event stream and printed as they are written. It
needs only httpx and the daemon's HTTP API, like any real adapter (Slack, IRC,
a webhook, ...) would:

    POST /v1/channels/{channel}/messages   {"user", "text"[, "persona"]}  -> 202 {"id"}
    GET  /v1/channels/{channel}/events     (SSE; "message" events carry id: = message id)

Run ``agentd serve`` first, then::

    python examples/terminal_adapter.py --channel general --user "$USER"
    echo "what should I learn?" | python examples/terminal_adapter.py --channel general

With an API key: ``--api-key KEY`` or ``AGENTD_API_KEY=KEY``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Iterator

import httpx


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, dict, str | None]]:
    """``(event, data, id)`` for each server-sent event."""
    event, data, event_id = "message", [], None
    for line in lines:
        if not line:
            if data:
                yield event, json.loads("\n".join(data)), event_id
            event, data, event_id = "message", [], None
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                event_id = value


class Adapter:
    """Posts lines and prints each reply to them, in order."""

    def __init__(self, url: str, channel: str, user: str, persona: str | None, api_key: str | None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(30.0, read=None))
        self.channel = channel
        self.user = user
        self.persona = persona
        self.pending: set[int] = set()
        self.changed = threading.Condition()
        self.last_id: str | None = None
        self.ready = threading.Event()

    def post(self, text: str) -> None:
        body = {"user": self.user, "text": text, **({"persona": self.persona} if self.persona else {})}
        response = self.client.post(f"/v1/channels/{self.channel}/messages", json=body)
        if response.status_code != 202:
            print(f"! {response.json().get('error', {}).get('message', response.text)}", file=sys.stderr)
            return
        with self.changed:
            self.pending.add(response.json()["id"])

    def listen(self) -> None:
        """Follow the channel; reconnect with Last-Event-ID if the stream drops."""
        while True:
            headers = {"Last-Event-ID": self.last_id} if self.last_id else {}
            try:
                with self.client.stream("GET", f"/v1/channels/{self.channel}/events", headers=headers) as stream:
                    for event, data, event_id in sse_events(self._lines(stream)):
                        if event_id is not None:
                            self.last_id = event_id
                        self.handle(event, data)
            except httpx.TransportError:
                pass

    def _lines(self, stream: httpx.Response) -> Iterator[str]:
        for line in stream.iter_lines():
            self.ready.set()
            yield line

    def handle(self, event: str, data: dict) -> None:
        with self.changed:
            mine = data.get("user_message_id") in self.pending or data.get("reply_to") in self.pending
        if event == "message" and data.get("role") == "assistant" and mine:
            print(f"{data['author']}> {data['content']}", flush=True)
            self.done(data["reply_to"])
        elif event == "error" and mine:
            print(f"! {data.get('message')} ({data.get('code')})", file=sys.stderr, flush=True)
            self.done(data["user_message_id"])

    def done(self, message_id: int) -> None:
        with self.changed:
            self.pending.discard(message_id)
            self.changed.notify_all()

    def wait_all(self) -> None:
        with self.changed:
            self.changed.wait_for(lambda: not self.pending)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("AGENTD_URL", "http://127.0.0.1:8765"))
    parser.add_argument("--channel", default="general")
    parser.add_argument("--user", default=os.environ.get("USER", "terminal"))
    parser.add_argument("--persona", help="Who answers (default: the persona bound to the channel).")
    parser.add_argument("--api-key", default=os.environ.get("AGENTD_API_KEY"))
    args = parser.parse_args()
    adapter = Adapter(args.url.rstrip("/"), args.channel, args.user, args.persona, args.api_key)
    threading.Thread(target=adapter.listen, daemon=True).start()
    adapter.ready.wait(10)  # following before the first post, so replies stream in live
    interactive = sys.stdin.isatty()
    for line in sys.stdin:
        if line.strip():
            adapter.post(line.strip())
            if interactive:
                adapter.wait_all()
    adapter.wait_all()  # piped input: every reply printed before exiting


if __name__ == "__main__":
    main()
