#!/usr/bin/env python3
"""A channel adapter that bridges a terminal to a running agentd, on agentd.client.

Each line typed (or piped) on stdin is posted to a channel; the persona's replies
are read from the channel's feed (which resumes with Last-Event-ID if the
connection drops or the daemon restarts) and printed. Any real adapter (Slack,
IRC, a webhook, ...) does the same two things:

    client.post(channel, user, text)        # POST /v1/channels/{channel}/messages -> 202 {"id"}
    for event in client.follow(channel):    # GET /v1/channels/{channel}/events (SSE)
        ...                                 # "message" events with role "assistant" are replies

(agentd.adapters has a base class that adds the rest: user and room mapping,
splitting to the network's limits, backoff, and delivery exactly once.)

Run ``agentd serve`` first, then::

    python examples/terminal_adapter.py --channel general --user "$USER"
    echo "what should I learn?" | python examples/terminal_adapter.py --channel general

With an API key: ``--api-key KEY`` or ``AGENTD_API_KEY=KEY``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any

from agentd.client import AgentdClient, ApiError


class Adapter:
    """Posts lines and prints each reply to them, in order."""

    def __init__(self, client: AgentdClient, channel: str, user: str, persona: str | None) -> None:
        self.client = client
        self.channel = channel
        self.user = user
        self.persona = persona
        self.pending: set[int] = set()
        self.changed = threading.Condition()
        self.ready = threading.Event()

    def post(self, text: str) -> None:
        try:
            posted = self.client.post(self.channel, self.user, text, persona=self.persona)
        except ApiError as exc:
            print(f"! {exc.reason}", file=sys.stderr)
            return
        with self.changed:
            self.pending.add(posted.id)

    def listen(self) -> None:
        """Follow the channel from now on (the client reconnects and resumes by itself)."""
        for event in self.client.follow(self.channel):
            if event.event == "open":
                self.ready.set()
            self.handle(event.event, event.data)

    def handle(self, event: str, data: dict[str, Any]) -> None:
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
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("AGENTD_URL", "http://127.0.0.1:8765"))
    parser.add_argument("--channel", default="general")
    parser.add_argument("--user", default=os.environ.get("USER", "terminal"))
    parser.add_argument("--persona", help="Who answers (default: the persona bound to the channel).")
    parser.add_argument("--api-key", default=os.environ.get("AGENTD_API_KEY"))
    args = parser.parse_args()
    with AgentdClient(args.url, args.api_key) as client:
        adapter = Adapter(client, args.channel, args.user, args.persona)
        threading.Thread(target=adapter.listen, daemon=True).start()
        adapter.ready.wait(10)  # following before the first post, so no reply is missed
        interactive = sys.stdin.isatty()
        for line in sys.stdin:
            if line.strip():
                adapter.post(line.strip())
                if interactive:
                    adapter.wait_all()
        adapter.wait_all()  # piped input: every reply printed before exiting


if __name__ == "__main__":
    main()
