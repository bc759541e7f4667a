"""``agentd inspect``: what a reply was given."""

from __future__ import annotations

import click

from agentd._exceptions import NotFound
from agentd.app import App
from agentd.cli.budget import budget_table
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json
from agentd.prompt.budget import ContextBudget


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
    data = record.data
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
                **data,
            }
        )
        return
    out.print(
        f"reply [bold]{record.reply_id}[/] by [bold]{record.persona}[/] in #{record.channel} "
        f"with {record.model}, {record.created_at:%Y-%m-%d %H:%M:%S} UTC"
    )
    if asked:
        out.print(f"[dim]{asked.author}:[/] {asked.content}")
    if reply:
        out.print(f"[dim]{record.persona}:[/] {reply.content}")
    retrieval = data.get("retrieval", {})
    out.print(
        f"\nretrieval: {retrieval.get('status')} in {retrieval.get('ms', 0)} ms; query: {retrieval.get('query', '')!r}"
    )
    for m in data.get("memories", []):
        out.print(
            f"  {m['score']:.2f} (relevance {m['relevance']:.2f})  {m['text']}  ({m['category']}, {m['scope']}, id {m['id']})"
        )
    if not data.get("memories"):
        out.print("  no memories were injected")
    recalled = data.get("user_history") or {}
    if recalled.get("message_ids"):
        out.print(
            f"past exchanges: messages {', '.join(map(str, recalled['message_ids']))} "
            f"(of {recalled.get('inspected', 0)} inspected)"
        )
    if recalled.get("seeds"):
        out.print(f"search seeds: {', '.join(recalled['seeds'])}")
    for call in data.get("tool_calls", []):
        out.print(f"tool {call['name']}({call['arguments']}) -> {'ok' if call.get('ok') else call.get('error')}")
    usage = data.get("usage", {})
    out.print(
        f"usage: {usage.get('prompt_tokens', 0)} prompt + {usage.get('completion_tokens', 0)} completion tokens "
        f"over {data.get('rounds', 1)} round(s)"
    )
    if "budget" in data:
        out.print(budget_table(ContextBudget.from_json(data["budget"])))
