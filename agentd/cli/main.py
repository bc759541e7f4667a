"""``agentd``: the command line.

Every command that shows data takes ``--json``. Errors print one line naming
what is wrong and exit with 2 (bad input or config) or 1 (anything else).

Commands are imported when they run, not when ``agentd`` starts: ``agentd
--help`` and shell completion read the one-line summaries in :data:`COMMANDS`,
so a command's imports (the store, the embedder, litellm, the web server) are
paid only by that command.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Callable
from functools import update_wrapper
from typing import Any, TypeVar

import click
from click.shell_completion import CompletionItem

from agentd import __version__
from agentd._exceptions import AgentdError, ConfigError, InvalidInput, NotFound

F = TypeVar("F", bound=Callable[..., Any])

#: Each command: the module that defines it (as an attribute of the same name) and its
#: one-line summary for ``agentd --help`` (tests/test_cli_startup.py checks they agree).
COMMANDS: dict[str, tuple[str, str]] = {
    "adapter": ("agentd.cli.adapter", "Bridge a chat network to a running daemon (`agentd serve`)."),
    "approvals": ("agentd.cli.approvals", "Tool calls waiting for an owner's approval: list, approve, deny."),
    "budget": ("agentd.cli.budget", "Show what PERSONA's prompt in a channel would be made of right now."),
    "chat": ("agentd.cli.chat", "Chat with PERSONA; recalled memories are shown before each streamed reply."),
    "db": ("agentd.cli.db", "The database: schema migrations, copying a store to another backend, backups."),
    "doctor": ("agentd.cli.doctor", "Check that everything agentd needs is here and working."),
    "init": ("agentd.cli.init", "Write an annotated agentd.toml and the example personas into DIR."),
    "inspect": (
        "agentd.cli.inspect",
        (
            "Show what reply MESSAGE_ID (or the reply to user message MESSAGE_ID) was given: the recalled memories "
            "with their scores, the budget, the model and its usage."
        ),
    ),
    "keys": ("agentd.cli.keys", "API keys with roles: create, list, revoke."),
    "mcp": ("agentd.cli.mcp", "Serve agentd's memory and personas to an MCP client on stdin/stdout."),
    "memory": ("agentd.cli.memory", "Long-term memories: add, search, list, forget, import, reembed."),
    "personas": ("agentd.cli.personas", "List the personas with their model and context window."),
    "post": ("agentd.cli.post", "Post TEXT to CHANNEL on a running daemon and print the persona's reply."),
    "schedule": ("agentd.cli.schedule", "Reminders, schedules and routines: add, list, cancel."),
    "serve": ("agentd.cli.serve", "Run the daemon: the HTTP API with server-sent events, on the actor runtime."),
    "tools": ("agentd.cli.tools", "Tools personas call: the audit trail of every call."),
    "user": ("agentd.cli.user", "A person's data: export everything kept about a user, or erase it."),
    "usage": ("agentd.cli.usage", "Show the tokens the models used and what they cost, per persona and model."),
}


class _Group(click.Group):
    """Loads each command on first use, and maps agentd's errors to one clear line on
    stderr and an exit status."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module = importlib.import_module(COMMANDS[cmd_name][0])
            command = getattr(module, cmd_name)
            _accept_global_options(command)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def _summary(self, name: str, limit: int) -> str:
        if name in self.commands:
            return self.commands[name].get_short_help_str(limit)
        # Shortened as click shortens a loaded command's help.
        return click.Command(name, help=COMMANDS[name][1]).get_short_help_str(limit)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        with formatter.section("Commands"):
            formatter.write_dl([(n, self._summary(n, limit)) for n in names])

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        items = [
            CompletionItem(n, help=self._summary(n, 45)) for n in self.list_commands(ctx) if n.startswith(incomplete)
        ]
        # The group's own options (--config, --help, ...), as click would complete them.
        return items + click.Command.shell_complete(self, ctx, incomplete)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ConfigError, InvalidInput, NotFound) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except AgentdError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)


#: Where the root context keeps a ``--json`` given before the command.
_JSON = "agentd.json"


def _global_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_root().params["config_path"] = value


def _accept_global_options(command: click.Command) -> None:
    """Let ``--config`` come after the command too (``agentd chat buddy --config X``), as it may
    before it: each command (and each command of a group) gets a hidden copy that sets the root's."""
    if not any(p.name == "global_config" for p in command.params):
        command.params.append(
            click.Option(
                ["--config", "global_config"],
                type=click.Path(dir_okay=False),
                hidden=True,
                expose_value=False,
                callback=_global_config,
                help="The config file (as before the command).",
            )
        )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _accept_global_options(sub)


def pass_app(f: F) -> F:
    """Give a command the :class:`App` built from ``--config`` (built on first use), and its
    ``as_json`` from a ``--json`` given before the command."""

    @click.pass_context
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        root = ctx.find_root()
        if root.meta.get(_JSON) and "as_json" in kwargs:
            kwargs["as_json"] = True
        app = root.meta.get("agentd.app")
        if app is None:
            from agentd.app import App
            from agentd.config import ConfigDeprecationWarning, load_config
            from agentd.observe.log import configure, log_deprecations

            # Deprecated keys are logged (once logging is set up as the file says), not printed.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConfigDeprecationWarning)
                config = load_config(root.params.get("config_path"))
            configure(config.logging)
            log_deprecations(config.deprecations)
            app = App(config)
            root.meta["agentd.app"] = app
            ctx.call_on_close(app.close)
        return ctx.invoke(f, app, *args, **kwargs)

    return update_wrapper(wrapper, f)  # type: ignore[return-value]


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="agentd")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar="AGENTD_CONFIG",
    help="Config file (default: $AGENTD_CONFIG, else ./agentd.toml, else $AGENTD_HOME/agentd.toml or "
    "~/.config/agentd/agentd.toml, else built-in defaults).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON (the commands that show data; also accepted after the command).",
)
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """agentd hosts LLM personas across chat channels, each with a long-term memory.

    --config and --json may come before or after the command.

    \b
    Quick start (no keys needed; the shipped personas use the offline model):
      agentd chat buddy --message "remember that I like Python"
      agentd memory search "what language?" --persona buddy
      agentd serve

    \b
    Shell completion (bash; zsh and fish likewise):
      eval "$(_AGENTD_COMPLETE=bash_source agentd)"
    """
    ctx.meta[_JSON] = as_json


def main() -> None:
    """Entry point of the ``agentd`` script."""
    # numpy's OpenBLAS starts a thread per core when imported, which spins for CPU (about 0.1 s
    # of a command's start on two cores); agentd's numpy work (norms, small batches) runs on many
    # threads at once, so one BLAS thread each is what it wants. A value the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    cli(prog_name="agentd")
