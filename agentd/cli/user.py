"""``agentd user …``: a person's data, exported as one JSON document or erased."""

from __future__ import annotations

import json
import sys

import click

from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json


@click.group()
def user() -> None:
    """A person's data: export everything kept about a user, or erase it."""


@user.command()
@click.argument("user_id", metavar="USER")
@click.option("--persona", help="Only what this persona keeps (default: every persona).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), help="Write to a file, not stdout.")
@pass_app
def export(app: App, user_id: str, persona: str | None, output: str | None) -> None:
    """Print everything kept about USER as one JSON document.

    \b
    Their memories (with their history), their episodes, the messages they
    wrote, the replies to them and those replies' context records, and the
    tool calls they triggered (with their approvals).
    """
    from agentd.cli.acting import operator, request
    from agentd.ops import users as ops

    document = ops.export(
        operator(app), request(ops.UserRequest, {"persona": "--persona"}, user=user_id, persona=persona)
    ).as_json()
    if output is None:
        print_json(document)
        return
    with open(output, "w", encoding="utf-8") as fh:
        json.dump(document, fh, ensure_ascii=False, indent=2)
        fh.write("\n")
    click.echo(f"wrote {output}", err=True)


@user.command()
@click.argument("user_id", metavar="USER")
@click.option("--persona", help="Only what this persona keeps (default: every persona).")
@click.option("--yes", is_flag=True, help="Erase without asking (required when stdin is not a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def forget(app: App, user_id: str, persona: str | None, yes: bool, as_json: bool) -> None:
    """Erase everything kept about USER, in one transaction; it cannot be undone.

    \b
    Their messages and the replies to them with their context records, their
    memories and episodes with their vectors, full-text entries and history,
    memories learned from their messages, and the tool calls they triggered
    (with their approvals). Elsewhere in their channels a
    word-for-word quote of them is replaced by "[forgotten]". On SQLite the
    deleted bytes are overwritten and the WAL truncated (docs/guides/privacy.md).
    """
    from agentd.cli.acting import operator, request
    from agentd.ops import users as ops

    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("erasing cannot be undone: pass --yes")
        click.confirm(f"erase everything kept about {user_id!r}?", abort=True)
    erased = ops.forget(
        operator(app), request(ops.UserRequest, {"persona": "--persona"}, user=user_id, persona=persona)
    )
    if as_json:
        print_json(erased.as_json())
        return
    redacted = sum(erased.redacted.values())
    out.print(
        f"forgot {user_id}: {erased.messages} messages, {erased.memories} memories, {erased.episodes} episodes, "
        f"{erased.context_records} context records, {erased.memory_history} history entries, "
        f"{erased.tool_calls} tool calls; "
        f"{redacted} quotes redacted elsewhere"
    )
    if erased.vacuumed:
        out.print("the database was rebuilt (VACUUM) to remove copies left in its pages")
    if erased.remaining:
        found = ", ".join(f"{n} in {name}" for name, n in sorted(erased.remaining.items()))
        out.print(f"warning: copies of their texts remain in the database files ({found})", style="bold red")
    if erased.wal_kept:
        out.print("note: a reader kept the WAL from being truncated; its old pages go at the next checkpoint")
    if erased.until_vacuum:
        out.print(f"note: {erased.until_vacuum}")
