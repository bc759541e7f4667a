"""``agentd chat``: talk to a persona in this process, and see what it recalled."""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterator
from contextlib import nullcontext

import click
from rich.markup import escape

from agentd._exceptions import AgentdError, LLMAuthError
from agentd.app import App
from agentd.cli import acting
from agentd.cli.main import pass_app
from agentd.cli.output import err, out, print_json_line
from agentd.cli.waiting import Waiting, model_wait
from agentd.llm.models import missing_credentials
from agentd.llm.offline import is_offline
from agentd.observe.log import configure
from agentd.ops.chat import ChatRequest, in_conversation
from agentd.ops.chat import chat as chat_operation
from agentd.personas import Persona
from agentd.runtime import Done, Error, Event, HistoryContext, MemoryContext, Runtime, TokenDelta, ToolCall, ToolResult
from agentd.runtime.intake import until_done

#: The flag that gives each field of the chat request (an error names it).
FLAGS = {"persona": "--persona", "channel": "--channel", "user": "--user", "message": "--message"}


def default_channel(persona: Persona) -> str:
    """The persona's first channel that is not a pattern, else ``cli``."""
    return next((c for c in persona.channels if not any(ch in c for ch in "*?[")), "cli")


def show(event: Event) -> None:
    """Print one event for a person: recalled context first, then the streamed reply."""
    if isinstance(event, MemoryContext):
        if event.memories:
            err.print(f"[dim]recalled {len(event.memories)} memor{'y' if len(event.memories) == 1 else 'ies'}:[/]")
            for m in event.memories:
                err.print(f"[dim]  {m.score:.2f}  {m.text}  ({m.category}, {m.scope})[/]")
        elif event.status not in ("ok", "disabled"):
            err.print(f"[dim]memory retrieval skipped: {event.status}[/]")
        for e in event.episodes:
            text = e.text.replace("\n", " / ")
            err.print(f"[dim]  earlier conversation {e.score:.2f}  {text}[/]")
    elif isinstance(event, HistoryContext) and event.snippets:
        err.print(f"[dim]recalled {len(event.snippets)} earlier exchange(s); seeds: {', '.join(event.seeds) or '-'}[/]")
    elif isinstance(event, TokenDelta):
        sys.stdout.write(event.text)
        sys.stdout.flush()
    elif isinstance(event, ToolCall):
        err.print(f"[dim]→ {event.name}({', '.join(f'{k}={v!r}' for k, v in event.arguments.items())})[/]")
    elif isinstance(event, ToolResult):
        err.print(f"[dim]← {event.name}: {'ok' if event.error is None else event.error['message']}[/]")
    elif isinstance(event, Done):
        sys.stdout.write("\n")
        err.print(
            f"[dim](reply {event.message_id}; {event.budget.get('total_tokens', 0):,} prompt tokens; "
            f"`agentd inspect {event.message_id}` shows what it was given)[/]"
        )
    elif isinstance(event, Error):
        sys.stdout.write("\n")
        err.print(f"[red]error ({event.code}):[/] {escape(event.message)}", soft_wrap=True)


@click.command()
@click.argument("persona")
@click.option("--channel", "-c", help="Channel (default: the persona's first channel, else 'cli').")
@click.option("--user", "-u", help="Who you are (default: [user] name, else your login name).")
@click.option("--message", "-m", help="Send one message and exit (default: interactive).")
@click.option(
    "--visibility",
    type=click.Choice(["direct", "shared"]),
    help="Who reads the channel, if its first message has not said so yet (default: shared). In a direct "
    "channel all of your memories may be recalled; in a shared one only those learned there.",
)
@click.option("--no-memory", is_flag=True, help="Do not recall memories for these messages.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON event per line.")
@pass_app
def chat(
    app: App,
    persona: str,
    channel: str | None,
    user: str | None,
    message: str | None,
    visibility: str | None,
    no_memory: bool,
    as_json: bool,
) -> None:
    """Chat with PERSONA; recalled memories are shown before each streamed reply.

    Interactive without --message: one line per message, Ctrl-D or /quit to leave. Before it
    exits, the exchanges' episodes and facts are indexed (up to [daemon] shutdown_grace_seconds;
    what is left, the next start does).
    """
    p = app.personas[persona]
    # A key that is missing is said at once, before the store, the embedder and the runtime start.
    missing = missing_credentials(p.model, p.api_key_env, p.api_base)
    if missing:
        raise LLMAuthError(f"model {p.model!r} needs {', '.join(missing)}, which is not set in the environment")
    if app.config.logging.level in ("info", "warning"):
        # One log line per turn is right for the daemon, noise between a person's messages: here
        # the events show each turn's outcome, a failed one's error included.
        configure(app.config.logging.model_copy(update={"level": "error"}))
    channel = channel or default_channel(p)
    user = user or app.config.default_user()
    # The embedding model and the tokenizer load on another thread (native code, mostly) while
    # the store opens and the runtime starts; the first recall waits for the model if need be.
    app.embedder  # noqa: B018  (built here, so both threads use the same one)
    loading = threading.Thread(target=_preload, args=(app,), name="agentd-preload")
    loading.start()
    runtime = Runtime(app)
    failed = False
    # The turn ends with the model's own timeout (llm_timeout); this is only a backstop above it.
    wait = max(300.0, 2 * (p.model_timeout_seconds or app.config.models.llm_timeout_seconds) + 60)
    try:
        lines = [message] if message is not None else _prompt_lines(p.name, channel)
        for line in lines:
            # The offline model answers at once: only a real model's wait is announced.
            waiting = Waiting(model_wait(p, app.config)) if not as_json and not is_offline(p.model) else None
            try:
                if waiting is not None:
                    waiting.__enter__()
                events = _turn(app, runtime, p.name, channel, user, line, no_memory, visibility, wait)
                for event in events:
                    if waiting is not None and isinstance(event, TokenDelta | Done | Error):
                        waiting.done()
                    if as_json:
                        print_json_line(event.as_json())
                    else:
                        show(event)
                    failed = failed or isinstance(event, Error)
            except AgentdError as exc:
                if message is not None:
                    raise
                # A line refused (too long, say) is one line: the session goes on.
                err.print(f"[red]error:[/] {escape(str(exc))}")
            finally:
                if waiting is not None:
                    waiting.done()
        # Left normally (not by Ctrl-C or an error): what the exchanges taught is saved first.
        _let_learning_finish(runtime, app.config.daemon.shutdown_grace_seconds, quiet=as_json)
    finally:
        runtime.stop(grace=5)
        loading.join()
    if failed and message is not None:
        sys.exit(1)


def _turn(  # noqa: PLR0913 - the command's flags, passed on
    app: App,
    runtime: Runtime,
    persona: str,
    channel: str,
    user: str,
    line: str,
    no_memory: bool,
    visibility: str | None,
    wait: float,
) -> Iterator[Event]:
    """One message through the chat operation (as every way in sends one), and its turn's events."""
    events: queue.Queue[Event] = queue.Queue()
    ctx = in_conversation(acting.operator(app, user=user), runtime, sink=events.put)
    values = {"persona": persona, "channel": channel, "user": user, "message": line, "visibility": visibility}
    chat_operation(ctx, acting.request(ChatRequest, FLAGS, disable_memory=no_memory, **values))
    return until_done(events, wait)


def _let_learning_finish(runtime: Runtime, bound: float, quiet: bool) -> None:
    """Give the background jobs (episodes, extracted facts) of the exchanges just had up to ``bound``
    seconds (``[daemon] shutdown_grace_seconds``) to finish before the process ends, saying so when
    it takes a moment; what is left is resumed by the next start (``agentd serve`` or ``chat``)."""
    if runtime.learning_idle(min(0.5, bound)):
        return
    with Waiting("saving what this conversation taught (episodes, facts)") if not quiet else nullcontext():
        if not runtime.learning_idle(max(bound - 0.5, 0.0)) and not quiet:
            err.print("[dim]not finished; the next start (agentd serve or chat) resumes it[/]")


def _preload(app: App) -> None:
    try:
        app.preload_models()
    except AgentdError:  # the turn that needs the model reports why it is missing
        pass


def _prompt_lines(persona: str, channel: str):  # type: ignore[no-untyped-def]
    out.print(f"[dim]chatting with {persona} in #{channel}; Ctrl-D or /quit to leave[/]")
    while True:
        try:
            line = input("you> ")
        except EOFError:
            return
        if line.strip() in ("/quit", "/exit"):
            return
        if line.strip():
            yield line
