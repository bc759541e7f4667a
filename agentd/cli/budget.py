"""``agentd budget``: where the tokens of a persona's next prompt would go."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import click
from rich.table import Table

from agentd.access.scopes import check_identifier
from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json
from agentd.prompt.budget import ContextBudget
from agentd.runtime.pipeline.turn import TurnPreparer
from agentd.runtime.rooms import room_of

BAR_WIDTH = 30


#: Transcript messages ``agentd budget`` shows in a room by default.
ROOM_LINES = 10


def _bar(tokens: int, window: int) -> str:
    cells = round(BAR_WIDTH * tokens / window) if window else 0
    return "█" * cells + "·" * (BAR_WIDTH - cells)


def budget_table(b: ContextBudget, has_message: bool = True) -> Table:
    """The ContextBudget as a table: tokens and share of the window per section, with a bar."""
    table = Table("section", "tokens", "share", "", "detail")
    rows = [
        ("system prompt", b.system_tokens, "never dropped"),
        (
            "project (AGENTS.md)",
            b.project_tokens,
            "truncated" if b.project_truncated else ("" if b.project_tokens else "none"),
        ),
        (
            "profile",
            b.profile_tokens,
            f"{b.profile_included} included, {b.profile_dropped} dropped" if b.profile_tokens else "off or empty",
        ),
        ("memories", b.memory_tokens, f"{b.memories_included} included, {b.memories_dropped} dropped"),
        ("episodes", b.episode_tokens, f"{b.episodes_included} included, {b.episodes_dropped} dropped"),
        ("user history", b.user_history_tokens, f"{b.snippets_dropped} snippets dropped" if b.snippets_dropped else ""),
        ("history", b.history_tokens, f"{b.history_messages} of {b.history_available} messages"),
        ("current message", b.current_tokens, "" if has_message else "none given"),
        ("tool definitions", b.tools_tokens, ""),
        ("output reserve", b.output_reserve, "persona max_reply_tokens"),
        ("free", b.free_tokens, ""),
    ]
    for name, tokens, detail in rows:
        table.add_row(name, f"{tokens:,}", f"{100 * tokens / b.window:5.1f}%", _bar(tokens, b.window), detail)
    table.add_section()
    used = b.total_tokens + b.output_reserve
    table.add_row("total", f"{used:,}", f"{100 * used / b.window:5.1f}%", _bar(used, b.window), f"of {b.window:,}")
    return table


@click.command()
@click.argument("persona")
@click.option("--channel", "-c", required=True, help="Channel whose prompt to assemble.")
@click.option(
    "--user",
    "-u",
    help="Sender whose user-scoped memories and past exchanges count (default: [user] name, else your login "
    "name, as for chat).",
)
@click.option(
    "--message",
    "-m",
    help="The next message (default: none; memories are recalled for the channel's last user message).",
)
@click.option(
    "--transcript",
    "lines",
    type=click.IntRange(min=0),
    default=None,
    help="Show the transcript's last N messages as PERSONA's prompt carries them (default in a room: 10).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the ContextBudget as JSON.")
@pass_app
def budget(
    app: App, persona: str, channel: str, user: str | None, message: str | None, lines: int | None, as_json: bool
) -> None:
    """Show what PERSONA's prompt in a channel would be made of right now.

    Each section's tokens and share of the model's context window, how many
    history messages fit of those available, which memories would be
    injected with their scores, and whether the context is exhausted. In a room
    (a channel bound to several personas) also the transcript's last messages as
    PERSONA sees them: its own replies as its turns, everyone else's by name.
    """
    check_identifier("--channel", channel)
    user = check_identifier("--user", user or app.config.default_user())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentd-retrieval") as pool:
        shown = TurnPreparer.for_app(app, pool).prepare(app.personas[persona], channel, user, message)
    ctx, recalled = shown.context, shown.recalled
    b = ctx.budget
    if as_json:
        print_json(b.as_json())
        return
    out.print(
        f"[bold]{persona}[/] in [bold]#{channel}[/] for [bold]{user}[/]: model {b.model}, window {b.window:,} tokens "
        f"({b.window_source}), tokenizer {b.tokenizer}"
    )
    out.print(budget_table(b, has_message=message is not None))
    if ctx.profile:
        out.print("profile:")
        for memory in ctx.profile:
            out.print(f"  {memory.text}  ({memory.category}, id {memory.id})")
    if ctx.memories:
        out.print("memories injected:")
        for hit in ctx.memories:
            out.print(
                f"  {hit.score:.2f}  {hit.memory.text}  ({hit.memory.category}, {hit.memory.scope}, id {hit.memory.id})"
            )
    if ctx.user_history:
        out.print(f"past exchanges recalled (seeds: {', '.join(recalled.seeds) or 'none'}):")
        for snippet in ctx.user_history:
            out.print(f"  {snippet.text}")
    if shown.registry.names():
        out.print(f"tools offered ({b.tools_tokens:,} tokens): {', '.join(shown.registry.names())}")
    out.print(f"exhausted: {'yes' if b.exhausted else 'no'}")
    if lines is None:
        lines = ROOM_LINES if room_of(app.config, channel) is not None else 0
    transcript = [m for m in ctx.messages if m.source == "history"][-lines:] if lines else []
    if transcript:
        out.print(f"transcript as {persona} sees it (last {len(transcript)} messages):")
        for m in transcript:
            who = "(its own turn)" if m.role == "assistant" else ""
            text = m.content if len(m.content) <= 160 else m.content[:159] + "…"
            out.print(f"  {m.role:9} {text} {who}".rstrip(), markup=False)
