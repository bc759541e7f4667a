"""``agentd inspect``: what a reply was given."""

from __future__ import annotations

import click

from agentd._exceptions import NotFound
from agentd.app import App
from agentd.cli.budget import budget_table
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json
from agentd.runtime.pipeline.record import ContextRecord
from agentd.store.messages import CHAIN_SOURCE, TRIGGER, Message
from agentd.store.tools import ToolCallEntry


@click.command()
@click.argument("message_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def inspect(app: App, message_id: int, as_json: bool) -> None:
    """Show what reply MESSAGE_ID (or the reply to user message MESSAGE_ID) was given:
    the recalled memories with their scores, the budget, the model and its usage."""
    with app.store.read() as conn:
        record = app.store.contexts.for_message(conn, message_id)
        if record is None:
            raise NotFound(
                "reply", message_id, "only replies (and the user messages they answer) have a context record"
            )
        reply = app.store.messages.get(conn, record.reply_id)
        asked = app.store.messages.get(conn, record.user_message_id) if record.user_message_id else None
        # The audit trail's account of the turn's calls: who decided an approval, the outcome.
        audited = app.store.tool_calls.for_messages(conn, [record.user_message_id] if record.user_message_id else [])
    given = ContextRecord.from_json(record.data)
    if as_json:
        print_json(
            {
                "reply_id": record.reply_id,
                "user_message_id": record.user_message_id,
                "persona": record.persona,
                "channel": record.channel,
                "model": record.model,
                "created_at": record.created_at.isoformat().replace("+00:00", "Z"),
                "message": asked.content if asked else None,
                "reply": reply.content if reply else None,
                **given.to_json(),
                "tool_log": [c.as_json() for c in audited],
            }
        )
        return
    out.print(
        f"reply [bold]{record.reply_id}[/] by [bold]{record.persona}[/] in #{record.channel} "
        f"with {record.model}, {record.created_at:%Y-%m-%d %H:%M:%S} UTC"
    )
    if asked:
        out.print(f"[dim]{asked.author}:[/] {asked.content}")
        if asked.role == TRIGGER:
            out.print(_room_line(record.persona, asked))
    if reply:
        out.print(f"[dim]{record.persona}:[/] {reply.content}")
    retrieval = given.retrieval
    out.print(f"\nretrieval: {retrieval.status} in {retrieval.ms} ms; query: {retrieval.query!r}")
    for m in given.memories:
        out.print(f"  {m.score:.2f} (relevance {m.relevance:.2f})  {m.text}  ({m.category}, {m.scope}, id {m.id})")
    if not given.memories:
        out.print("  no memories were injected")
    if given.episodes:
        out.print("earlier conversations recalled:")
    for m in given.episodes:
        text = m.text.replace("\n", " / ")
        out.print(f"  {m.score:.2f} (relevance {m.relevance:.2f})  {text}  ({m.scope}, id {m.id})")
    privacy = given.privacy
    if privacy:
        out.print(
            f"channel: {privacy.get('visibility')} ({privacy.get('source')}"
            + (f", user {privacy['owner']}" if privacy.get("owner") else "")
            + f"); {privacy.get('rule', '')}"
        )
        for item in privacy.get("ineligible", ()):
            out.print(f"  not eligible: memory {item['id']} ({item['scope']}): {item['reason']}")
    recalled = given.user_history
    if recalled.status != "ok":
        out.print(f"past exchanges: {recalled.status}")
    if recalled.message_ids:
        out.print(
            f"past exchanges: messages {', '.join(map(str, recalled.message_ids))} (of {recalled.inspected} inspected)"
        )
    if recalled.seeds:
        out.print(f"search seeds: {', '.join(recalled.seeds)}")
    _print_tools(given, audited, asked.author if asked else "the asker")
    usage = given.usage
    out.print(
        f"usage: {usage.get('prompt_tokens', 0)} prompt + {usage.get('completion_tokens', 0)} completion tokens "
        f"over {given.rounds} round(s)"
    )
    out.print(budget_table(given.budget))


def _print_tools(given: ContextRecord, audited: list[ToolCallEntry], asker: str) -> None:
    """The turn's tool calls, the approvals the audit trail kept for them, and the tools withheld."""
    for call in given.tool_calls:
        out.print(f"tool {call.name}({call.arguments}) -> {'ok' if call.ok else call.error}")
    for entry in audited:
        if entry.approval != "none":
            decided = entry.decided_by or "timeout"
            out.print(f"  approval of {entry.tool}: {entry.approval} by {decided} -> {entry.outcome}")
    if given.withheld_tools:
        out.print(f"tools withheld from {asker}: {', '.join(given.withheld_tools)}")


def _room_line(persona: str, asked: Message) -> str:
    """How a reply in a room came to be asked for (the message it answers was a room's trigger)."""
    hop = int(asked.options.get("hop", 0))
    if asked.source == CHAIN_SOURCE:
        return f"in a room: {asked.author} called on {persona} (persona-to-persona reply {hop} of the chain)"
    return f"in a room: {persona} answered {asked.author}'s message after the personas before it"
