"""``agentd memory …``: add, search, list, forget, import and re-embed memories.

``add``, ``search``, ``list``, ``forget`` and ``history`` are thin adapters over the memory
operations (:mod:`agentd.ops.memory`, what ``/v1/memories`` and ``/v1/memory/search`` call):
their flags become the request's fields, and the checks are the operation's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from agentd._exceptions import InvalidInput
from agentd.access.scopes import GLOBAL, Scope
from agentd.app import App
from agentd.cli.acting import operator, request
from agentd.cli.main import pass_app
from agentd.cli.output import err, out, print_json, progress_bar
from agentd.ops import memory as ops

#: The flag that gives each request field (an error names the flag).
FLAGS = {
    "persona": "--persona",
    "channel": "--channel",
    "userId": "--user",
    "user_id": "--user",
    "category": "--category",
    "metadata": "--metadata",
    "limit": "--limit",
    "offset": "--offset",
    "minScore": "--min-score",
    "min_score": "--min-score",
    "episodes_of": "--episodes",
    "text": "text",
    "query": "query",
}


def _only_one(channel: str | None, user: str | None, global_: bool) -> None:
    if sum((channel is not None, user is not None, global_)) > 1:
        raise InvalidInput("scope", "give only one of --channel, --user, --global")


def _scope(channel: str | None, user: str | None, global_: bool) -> str | None:
    """The one scope the flags name (``None``: none named)."""
    _only_one(channel, user, global_)
    if channel is not None:
        return str(Scope.channel(channel))
    if user is not None:
        return str(Scope.user(user))
    return str(GLOBAL) if global_ else None


def _metadata(raw: str | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInput("--metadata", f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(value, dict):
        raise InvalidInput("--metadata", 'must be a JSON object, e.g. \'{"source": "crm"}\'')
    return value


_persona = click.option("--persona", "-p", required=True, help="Persona whose memory this is.")
_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group()
def memory() -> None:
    """Long-term memories: add, search, list, forget, import, reembed."""


@memory.command()
@click.argument("text")
@_persona
@click.option("--channel", "-c", help="Store in this channel's scope.")
@click.option("--user", "-u", help="Store in this user's scope.")
@click.option("--global", "global_", is_flag=True, help="Store in the persona's global scope (default).")
@click.option("--category", default="fact", show_default=True, help="preference, fact, decision, …")
@click.option("--metadata", help="A JSON object kept with the memory and returned with results.")
@_json
@pass_app
def add(
    app: App,
    text: str,
    persona: str,
    channel: str | None,
    user: str | None,
    global_: bool,
    category: str,
    metadata: str | None,
    as_json: bool,
) -> None:
    """Remember TEXT (the same text in the same persona and scope is stored once)."""
    _only_one(channel, user, global_)
    body = request(
        ops.AddMemory,
        FLAGS,
        persona=persona,
        text=text,
        category=category,
        channel=channel,
        userId=user,
        scope="global" if global_ else None,
        metadata=_metadata(metadata),
    )
    added = ops.remember(operator(app), body)
    mem = added.memory
    if as_json:
        print_json({**mem.as_json(), "created": added.created})
    elif added.created:
        out.print(f"stored memory {mem.id} in {persona} / {mem.scope}")
    else:
        out.print(f"already stored as memory {mem.id} in {persona} / {mem.scope}")


@memory.command()
@click.argument("query")
@_persona
@click.option("--channel", "-c", help="Also this channel's memories.")
@click.option("--user", "-u", help="Whose memories (default: [user] name, else your login name, as for chat).")
@click.option(
    "--episodes",
    is_flag=True,
    help="Also the earlier exchanges indexed as episodes: those of --channel and of the user's direct channels.",
)
@click.option("--limit", "-n", type=click.IntRange(1, 1000), help="How many results (default: memory.search_results).")
@click.option("--min-score", type=click.FloatRange(0, 1), help="Relevance threshold (default: memory.min_score).")
@_json
@pass_app
def search(
    app: App,
    query: str,
    persona: str,
    channel: str | None,
    user: str | None,
    episodes: bool,
    limit: int | None,
    min_score: float | None,
    as_json: bool,
) -> None:
    """Search memories for QUERY as a turn would: the persona's global memories, the user's own
    and --channel's; memories only, episodes too with --episodes."""
    body = request(
        ops.LocalSearch,
        FLAGS,
        query=query,
        persona=persona,
        channel=channel,
        userId=user or app.config.default_user(),
        limit=limit,
        minScore=min_score,
        episodes=episodes,
    )
    found = ops.search(operator(app), body)
    if as_json:
        print_json(found.as_json())
        return
    if not found.results:
        err.print("no memories above the threshold")
        return
    table = Table("id", "score", "relevance", "category", "scope", "text", "created")
    for h in found.results:
        table.add_row(str(h.id), f"{h.score:.2f}", f"{h.relevance:.2f}", h.category, h.scope, h.text, h.created_at[:10])
    out.print(table)


@memory.command(name="list")
@_persona
@click.option("--channel", "-c", help="Only this channel's memories.")
@click.option("--user", "-u", help="Only this user's memories.")
@click.option("--global", "global_", is_flag=True, help="Only the persona's global memories.")
@click.option(
    "--episodes",
    "episodes_of",
    metavar="channel:NAME|user:ID",
    help="The episodes (indexed exchanges) of a channel or of a user's direct channels instead.",
)
@click.option("--limit", "-n", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.option("--offset", type=click.IntRange(0), default=0)
@_json
@pass_app
def list_(
    app: App,
    persona: str,
    channel: str | None,
    user: str | None,
    global_: bool,
    episodes_of: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """List a persona's memories, newest first (episodes only with --episodes)."""
    body = request(
        ops.LocalList,
        FLAGS,
        persona=persona,
        scope=_scope(channel, user, global_),
        episodes_of=episodes_of,
        limit=limit,
        offset=offset,
    )
    listed = ops.list_memories(operator(app), body)
    if as_json:
        print_json([m.as_json() for m in listed.memories])
        return
    table = Table("id", "scope", "category", "text", "created")
    for m in listed.memories:
        table.add_row(str(m.id), m.scope, m.category, m.text, m.created_at[:19])
    out.print(table)
    err.print(f"{len(listed.memories)} shown, {listed.total} stored for {persona}")


@memory.command()
@click.argument("memory_id", type=int)
@_json
@pass_app
def forget(app: App, memory_id: int, as_json: bool) -> None:
    """Delete memory MEMORY_ID (its row, vector and index entry)."""
    forgotten = ops.forget(operator(app), request(ops.ForgetMemory, {"id": "MEMORY_ID"}, id=memory_id))
    mem = forgotten.forgotten
    if as_json:
        print_json(forgotten.as_json())
    else:
        out.print(f"forgot memory {mem.id} ({mem.persona} / {mem.scope}): {mem.text}")


@memory.command()
@click.argument("memory_id", type=int)
@_json
@pass_app
def history(app: App, memory_id: int, as_json: bool) -> None:
    """Show how memory MEMORY_ID changed: each decision of fact extraction (ADD, UPDATE with
    the old text, DELETE, NONE) and its reason, oldest first (also for a deleted memory)."""
    found = ops.history(operator(app), request(ops.HistoryRequest, {"memory_id": "MEMORY_ID"}, memory_id=memory_id))
    if as_json:
        print_json(found.as_json())
        return
    table = Table("when", "event", "old text", "new text", "reason")
    for e in found.history:
        table.add_row(e.created_at[:19], e.event, e.old_text or "", e.new_text or "", e.reason)
    out.print(table)


@memory.command(name="import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--persona", "-p", help="Persona for lines that name none.")
@click.option("--strict", is_flag=True, help="All or nothing: one bad line and nothing is imported.")
@_json
@pass_app
def import_(app: App, file: Path, persona: str | None, strict: bool, as_json: bool) -> None:
    """Import memories from a JSONL FILE (one JSON object per line, UTF-8).

    \b
    Each line: {"text": "...", "persona": "buddy", "scope": "global" | "channel:NAME" | "user:ID",
                "category": "fact", "metadata": {...}, "created_at": "2025-01-15T10:30:00Z"}
    Only "text" is required (and "persona" unless --persona is given).
    Bad lines (bad JSON, bad fields, bytes that are not UTF-8) are skipped and reported with
    their line numbers, and the rest imported; with --strict nothing is imported then. Exits 2
    when a line was skipped, else 0. A UTF-8 byte order mark is allowed.
    """
    with progress_bar("importing") as update:
        report = app.memory.import_jsonl(file, persona, progress=update, strict=strict)
    if as_json:
        print_json(report.as_json())
    else:
        for number, reason in report.skipped:
            click.echo(f"{file}:{number}: {reason}", err=True)
        if report.refused:
            click.echo(f"imported nothing from {file}: {len(report.skipped)} bad line(s) (--strict)")
        else:
            click.echo(
                f"imported {file}: added {report.added}, already stored {report.duplicates}, "
                f"skipped {len(report.skipped)}"
            )
    if report.skipped:
        sys.exit(2)


@memory.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_json
@pass_app
def reembed(app: App, yes: bool, as_json: bool) -> None:
    """Rebuild every vector with the configured embedding model.

    Use after changing [embedding]: the store refuses to mix vectors of two models.
    """
    from agentd.memory import MemoryService

    embedder = app.embedder
    if embedder is None:
        raise InvalidInput("embedding.provider", 'is "none"; configure a model to re-embed with')
    space = app.store.embedding_space()
    if not yes and not as_json:
        was = f"{space.model_id} ({space.dimension}-d)" if space else "no model"
        click.confirm(f"re-embed every memory: {was} -> {embedder.model_id} ({embedder.dimension}-d)?", abort=True)
    # Not app.memory: that checks the store's model first, and re-embedding is how a mismatch is fixed.
    service = MemoryService(app.store, embedder, app.config.memory, app.personas, check_embedding=False)
    with progress_bar("re-embedding") as update:
        count = service.reembed(progress=update)
    if as_json:
        print_json({"reembedded": count, "model": embedder.model_id, "dimension": embedder.dimension})
    else:
        out.print(f"re-embedded {count} memories with {embedder.model_id} ({embedder.dimension}-d)")
