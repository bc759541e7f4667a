"""``agentd schedule``: make, list and cancel schedules in the database (a running daemon fires them).

Each command is a thin adapter over its operation in :mod:`agentd.ops.schedules` (the API's and
the ``schedule`` tools' too), acting as the operator: a bad time, cron expression or timezone
exits with 2 and names the field, as the API's 422 does. A running daemon notices a schedule made
here within ``[schedules] rescan_seconds``.
"""

from __future__ import annotations

from datetime import datetime

import click

from agentd.app import App
from agentd.cli.acting import operator, request
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json
from agentd.ops import schedules as ops
from agentd.ops.schedules import ScheduleOut
from agentd.store.schedules import STATES

#: The flag that gives each field (a refused value names it).
FLAGS = {
    "persona": "PERSONA",
    "text": "TEXT",
    "channel": "--channel",
    "user": "--user",
    "at": "--at",
    "cron": "--cron",
    "timezone": "--timezone",
    "state": "--state",
    "limit": "--limit",
}


@click.group()
def schedule() -> None:
    """Reminders, schedules and routines: add, list, cancel.

    \b
    agentd schedule add buddy --channel general --at 2026-12-01T09:00:00+01:00 "Wish alice a happy birthday"
    agentd schedule add buddy --channel general --cron "0 9 * * 1-5" --timezone Europe/Paris "Post the day's plan"
    """


def _line(s: ScheduleOut) -> str:
    when = f"cron '{s.cron}' {s.timezone or 'UTC'}" if s.cron else f"at {_time(s.at)}" if s.at else ""
    due = f"  next {_time(s.next_at)}" if s.next_at else ""
    user = f"  for {s.user}" if s.user else ""
    return f"{s.id:>5}  {s.state:<9}  {s.persona} in {s.channel}{user}  {when}{due}  {s.text!r}"


def _time(iso: str | None) -> str:
    """An ISO time of a schedule (UTC, ``...Z``) as the listing shows it: ``2026-12-01 08:00:00Z``."""
    return f"{datetime.fromisoformat(iso or ''):%Y-%m-%d %H:%M:%S}Z"


@schedule.command()
@click.argument("persona")
@click.argument("text")
@click.option("--channel", "-c", required=True, help="Where the persona speaks when it fires.")
@click.option("--user", "-u", help="Whose memories its firings recall (and who may cancel it).")
@click.option("--at", "at", help="One time: ISO 8601 with an offset, e.g. 2026-12-01T09:00:00+01:00.")
@click.option("--cron", help="A recurrence: five-field cron (minute hour day month weekday).")
@click.option("--timezone", help="The IANA timezone of --cron (default UTC).")
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
@pass_app
def add(
    app: App,
    persona: str,
    text: str,
    channel: str,
    user: str | None,
    at: str | None,
    cron: str | None,
    timezone: str | None,
    as_json: bool,
) -> None:
    """Have PERSONA take a turn in a channel, triggered by TEXT, at a time (--at) or at each
    occurrence of a cron expression (--cron, --timezone)."""
    asked = request(
        ops.NewScheduleBody, FLAGS, persona=persona, channel=channel, text=text, user=user, at=at, cron=cron,
        timezone=timezone,
    )  # fmt: skip
    made = ops.create(operator(app), asked)
    if as_json:
        print_json(made.as_json())
        return
    click.echo(f"schedule {made.id} made: {_line(made).strip()}")


@schedule.command(name="list")
@click.option("--persona", "-p", help="Only this persona's.")
@click.option("--user", "-u", help="Only this user's.")
@click.option("--state", type=click.Choice(STATES), help="Only those in this state.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=200, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def list_schedules(
    app: App, persona: str | None, user: str | None, state: str | None, limit: int, as_json: bool
) -> None:
    """Schedules in every state, newest first."""
    query = request(ops.ScheduleQuery, FLAGS, state=state, persona=persona, user=user, limit=limit)
    found = ops.list_schedules(operator(app), query).schedules
    if as_json:
        print_json([s.as_json() for s in found])
        return
    if not found:
        out.print("no schedules; make one with: agentd schedule add PERSONA --channel C --at TIME TEXT")
        return
    for s in found:
        click.echo(_line(s))


@schedule.command(name="cancel")
@click.argument("schedule_id", metavar="ID", type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
@pass_app
def cancel_schedule(app: App, schedule_id: int, as_json: bool) -> None:
    """Cancel schedule ID (one already fired, missed or cancelled is left as it is)."""
    found = ops.cancel(operator(app), request(ops.ScheduleRef, {"id": "ID"}, id=schedule_id))
    if as_json:
        print_json(found.as_json())
        return
    done = "cancelled" if found.state == "cancelled" else f"not cancelled: it is {found.state}"
    click.echo(f"schedule {found.id} {done}")
