"""``agentd mcp``: serve agentd's memory and personas to an MCP client on stdin/stdout."""

from __future__ import annotations

import click

from agentd.access.identity import acting_user
from agentd.access.scopes import check_identifier
from agentd.app import App
from agentd.cli.main import pass_app


@click.command()
@click.option("--persona", "-p", help="The persona whose memory the tools use (default: all for searches).")
@click.option("--user", "-u", help="Who the client acts for (default: [user] name, else your login name).")
@click.option("--channel", "-c", help="The conversation the tools act in (default: none; chat: dm-USER).")
@pass_app
def mcp(app: App, persona: str | None, user: str | None, channel: str | None) -> None:
    """Serve agentd's memory and personas to an MCP client on stdin/stdout.

    What Claude Desktop and Claude Code launch (see docs/guides/mcp.md). Tools: remember,
    recall, forget, memory_context, list_memories, chat. The store and the config are the
    daemon's (it may be running); each call follows the HTTP API's scope and visibility rules
    for --persona, --user and --channel.
    """
    from agentd.mcp.server.stdio import serve_stdio
    from agentd.mcp.server.tools import Session

    if persona is not None:
        persona = app.personas[persona].name
    for field, value in (("--user", user), ("--channel", channel)):
        if value is not None:
            check_identifier(field, value)
    serve_stdio(app, Session(persona, acting_user(user, None, app.config), channel))
