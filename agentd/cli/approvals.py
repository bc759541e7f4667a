"""``agentd approvals …``: tool calls waiting for an owner's approval: list, approve, deny.

The command decides in the database; the running daemon moves the paused turn on within a
second (its approvals desk), in whichever way it runs turns.
"""

from __future__ import annotations

import getpass
import json
from datetime import datetime
from typing import Any

import click
from rich.table import Table

from agentd.app import App
from agentd.cli.acting import operator, request
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json
from agentd.ops import approvals as ops
from agentd.ops.approvals import STATES
from agentd.ops.base import ADMIN, OpContext


@click.group()
def approvals() -> None:
    """Tool calls waiting for an owner's approval: list, approve, deny."""


@approvals.command("list")
@click.option("--state", type=click.Choice(STATES), help="Only these (default: pending).")
@click.option("--all", "every", is_flag=True, help="Every approval, decided ones too.")
@click.option("--persona", help="Only this persona's.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def list_(app: App, state: str | None, every: bool, persona: str | None, as_json: bool) -> None:
    """List the tool calls waiting for approval (newest first), with who asked and the arguments."""
    query = request(ops.ApprovalQuery, {"state": "--state", "persona": "--persona"}, persona=persona)
    if every or state:  # None: every state (the model's default is pending)
        query = query.model_copy(update={"state": None if every else state})
    listed = ops.list_approvals(operator(app), query)
    if as_json:
        print_json(listed.as_json())
        return
    found = listed.approvals
    if not found:
        out.print("no approvals" if every or state else "no tool call waits for approval")
        return
    table = Table("id", "state", "persona", "channel", "asked by", "tool", "arguments", "created (UTC)")
    for a in found:
        table.add_row(
            str(a.id),
            a.state,
            a.persona,
            a.channel,
            a.asked_by,
            a.tool,
            _arguments(a.arguments)[:80],
            f"{datetime.fromisoformat(a.created_at):%m-%d %H:%M}",
        )
    out.print(table)


def _arguments(given: Any) -> str:
    """A call's arguments as the model sent them (JSON text)."""
    return given if isinstance(given, str) else json.dumps(given, ensure_ascii=False)


def _decide(app: App, approval_id: int, decision: str, reason: str | None = None) -> ops.ApprovalOut:
    """Decide as the operator at the command line."""
    asked = request(
        ops.ApprovalDecision, {"id": "ID", "reason": "--reason"}, id=approval_id, decision=decision, reason=reason
    )
    return ops.decide(OpContext(app, ADMIN, _operator()), asked)


def _operator() -> str:
    """Who decides from the command line (an operator: the database's owner)."""
    try:
        return f"operator:{getpass.getuser()}"
    except (KeyError, OSError):
        return "operator"


@approvals.command()
@click.argument("approval_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def approve(app: App, approval_id: int, as_json: bool) -> None:
    """Approve tool call ID: the daemon runs it and the turn goes on with its result."""
    decided = _decide(app, approval_id, "approve")
    if as_json:
        print_json(decided.as_json())
        return
    out.print(f"approved {decided.id}: {decided.tool} for {decided.asked_by} in #{decided.channel}")


@approvals.command()
@click.argument("approval_id", metavar="ID", type=int)
@click.option("--reason", help="Why (the model, and so the person, is told).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def deny(app: App, approval_id: int, reason: str | None, as_json: bool) -> None:
    """Deny tool call ID: it is never run; the turn goes on with the denial."""
    decided = _decide(app, approval_id, "deny", reason)
    if as_json:
        print_json(decided.as_json())
        return
    out.print(f"denied {decided.id}: {decided.tool} for {decided.asked_by} in #{decided.channel}")
