"""``agentd usage``: tokens and cost per persona and model, from the stored context records."""

from __future__ import annotations

import click
from rich.table import Table

from agentd.access.scopes import check_identifier
from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json
from agentd.spend.caps import TOKENS, CapStatus, SpendCaps
from agentd.spend.usage import UsageReport, usage_report


def usage_table(report: UsageReport) -> Table:
    """The report as a table: one row per group, with the extraction and delegation shares."""
    keys = list(report.groups[0].key) if report.groups else ["persona", "model"]
    table = Table(*keys, "calls", "prompt", "completion", "extraction", "delegation", "cost (USD)")
    for group in report.groups:
        t = group.total
        side = {k: group.kinds[k].prompt_tokens + group.kinds[k].completion_tokens for k in group.kinds}
        table.add_row(
            *group.key.values(),
            f"{t.calls:,}",
            f"{t.prompt_tokens:,}",
            f"{t.completion_tokens:,}",
            f"{side.get('extraction', 0):,}",
            f"{side.get('delegation', 0):,}",
            f"{t.cost_usd:.4f}",
        )
    table.add_section()
    t = report.total
    blank = [""] * (len(keys) - 1)
    table.add_row(
        "total", *blank, f"{t.calls:,}", f"{t.prompt_tokens:,}", f"{t.completion_tokens:,}", "", "", f"{t.cost_usd:.4f}"
    )
    return table


def caps_table(caps: list[CapStatus]) -> Table:
    """The spend caps as a table: each cap, what was used today (UTC), what is left, when it resets."""
    table = Table("cap", "of", "limit", "used today", "left", "resets (UTC)", title="spend caps")
    for c in caps:
        amounts = [f"{int(v):,}" if c.cap == TOKENS else f"${v:.4f}" for v in (c.limit, c.used, c.left)]
        table.add_row(c.cap, f"{c.kind} {c.name}", *amounts, f"{c.resets_at:%Y-%m-%d %H:%M}")
    return table


@click.command()
@click.option(
    "--persona",
    "-p",
    help="Only this persona's usage: its replies, the delegated tasks it did, extraction from its exchanges.",
)
@click.option("--since", help="From this date (YYYY-MM-DD, UTC) or ISO time on (default: everything stored).")
@click.option(
    "--by",
    type=click.Choice(["day", "persona", "model"]),
    help="One row per day, persona or model (default: one per persona and model).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (what GET /v1/usage answers).")
@pass_app
def usage(app: App, persona: str | None, since: str | None, by: str | None, as_json: bool) -> None:
    """Show the tokens the models used and what they cost, per persona and model.

    From the stored context records: each reply's model calls (every tool round),
    the subagent replies of delegations, and the extraction calls of
    [memory] extract = "model". Cost is priced now with litellm's cost map: 0 for
    the offline model and for models the map does not price. "calls" counts
    replies (a reply's tool rounds are one) and extraction calls.

    Then the spend caps (a persona's max_tokens_per_day and max_cost_usd_per_day,
    [users] max_tokens_per_day): what each used today (UTC) and what is left.
    """
    if persona is not None:  # a persona no longer configured still has its stored usage
        persona = app.personas[persona].name if persona in app.personas else check_identifier("--persona", persona)
    report = usage_report(app.store, persona=persona, since=since, by=by or "persona-model")
    caps = SpendCaps(app.config, app.store, app.personas).today(persona=persona)
    if as_json:
        print_json({**report.as_json(), "caps": [c.as_json() for c in caps]})
        return
    if not report.groups:
        out.print("no model usage stored" + (f" since {report.since:%Y-%m-%d %H:%M} UTC" if report.since else ""))
    else:
        out.print(usage_table(report))
    if caps:
        out.print(caps_table(caps))
