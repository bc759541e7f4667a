"""``agentd personas``: the personas and their models."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click
from rich.table import Table

from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def personas(app: App, as_json: bool) -> None:
    """List the personas with their model and context window."""
    rows = app.describe_personas()
    servers = mcp_status(app)
    if as_json:
        print_json([{**asdict(r), "mcp_servers": [servers[s] for s in r.mcp_servers]} for r in rows])
        return
    table = Table(
        "name", "model", "context window", "output reserve", "channels", "skills", "mcp servers", "description"
    )
    for r in rows:
        table.add_row(
            r.name,
            r.model,
            f"{r.context_window:,} ({r.window_source})",
            f"{r.output_reserve:,}",
            ", ".join(r.channels) or "-",
            ", ".join(r.skills),
            "\n".join(_shown(servers[s]) for s in r.mcp_servers) or "-",
            r.description,
        )
    out.print(table)


def mcp_status(app: App) -> dict[str, dict[str, Any]]:
    """Each MCP server a persona lists: whether it could be started, and its tools or why not
    (each is started now, all at once, each within its start_timeout_seconds)."""
    toolbox = app.mcp_tools
    if toolbox is None:
        return {}
    servers = toolbox.servers
    names = sorted({s for p in app.personas.values() for s in p.mcp_servers})
    servers.start(names)
    found = {}
    for name in names:
        status = servers.status(name)
        found[name] = {"name": name, "up": status.up, "tools": list(status.tools), "error": status.error}
    return found


def _shown(server: dict[str, Any]) -> str:
    if server["up"]:
        return f"{server['name']} ({len(server['tools'])} tools)"
    return f"{server['name']} [red](not running: {server['error']})[/]"
