"""``agentd``: the command line.

Every command that shows data takes ``--json``. Errors print one line naming
what is wrong and exit with 2 (bad input or config) or 1 (anything else).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import update_wrapper
from typing import Any, TypeVar

import click

from agentd import __version__
from agentd._exceptions import AgentdError, ConfigError, InvalidInput, NotFound
from agentd.app import App
from agentd.config import load_config

F = TypeVar("F", bound=Callable[..., Any])


class _Group(click.Group):
    """Maps agentd's errors to one clear line on stderr and an exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ConfigError, InvalidInput, NotFound) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except AgentdError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)


def pass_app(f: F) -> F:
    """Give a command the :class:`App` built from ``--config`` (built on first use)."""

    @click.pass_context
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        root = ctx.find_root()
        app = root.meta.get("agentd.app")
        if app is None:
            config = load_config(root.params.get("config_path"))
            from agentd.log import configure

            configure(config.logging)
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
    help="Config file (default: $AGENTD_CONFIG, else ./agentd.toml, else built-in defaults).",
)
def cli(config_path: str | None) -> None:
    """agentd hosts LLM personas across chat channels, each with a long-term memory.

    \b
    Quick start (no keys needed; the shipped personas use the offline model):
      agentd chat buddy --message "remember that I like Python"
      agentd memory search "what language?" --persona buddy
      agentd serve
    """


def _register() -> None:
    from agentd.cli import adapter, budget, chat, db, doctor, inspect, memory, personas, post, serve

    for command in (
        memory.memory,
        db.db,
        doctor.doctor,
        personas.personas,
        budget.budget,
        chat.chat,
        inspect.inspect,
        serve.serve,
        post.post,
        adapter.adapter,
    ):
        cli.add_command(command)


_register()


def main() -> None:
    """Entry point of the ``agentd`` script."""
    cli(prog_name="agentd")
