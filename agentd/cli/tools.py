"""``agentd tools log``: the audit trail of the tool calls personas made."""

from __future__ import annotations

import click
from rich.table import Table

from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json


@click.group()
def tools() -> None:
    """Tools personas call: the audit trail of every call."""


@tools.command()
@click.option("--persona", help="Only this persona's calls.")
@click.option("--user", "user_id", metavar="USER", help="Only the calls USER triggered.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def log(app: App, persona: str | None, user_id: str | None, limit: int, as_json: bool) -> None:
    """Every tool call (newest first): who triggered it, where, its arguments, the approval
    decision and the outcome (ok, error or denied) with the result cut short."""
    with app.store.read() as conn:
        calls = app.store.tool_calls.log(conn, persona, user_id, limit)
    if as_json:
        print_json({"tool_calls": [c.as_json() for c in calls]})
        return
    if not calls:
        out.print("no tool calls")
        return
    table = Table("id", "when (UTC)", "persona", "channel", "user", "tool", "arguments", "approval", "outcome")
    for c in calls:
        approval = c.approval if c.approval == "none" else f"{c.approval} ({c.decided_by or 'timeout'})"
        table.add_row(
            str(c.id),
            f"{c.created_at:%m-%d %H:%M:%S}",
            c.persona,
            c.channel,
            c.asked_by or "",
            c.tool,
            c.arguments[:60],
            approval,
            c.outcome,
        )
    out.print(table)
