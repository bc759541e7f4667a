"""``agentd adapter``: bridge a chat network to a running daemon."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click

from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.post import daemon_url
from agentd.config import MatrixPersonaAccount


@click.group()
def adapter() -> None:
    """Bridge a chat network to a running daemon (`agentd serve`)."""


def _server(spec: str, tls: bool) -> tuple[str, int]:
    host, sep, port = spec.rpartition(":")
    if not sep or host.endswith(":") or "]" in port:  # no port given (or a bare IPv6 address)
        return spec.strip("[]"), 6697 if tls else 6667
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise click.BadParameter(f"{spec!r}: expected HOST:PORT", param_hint="--server") from None


def _run(banner: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Say what the adapter bridges, then run it until it ends or Ctrl-C."""
    click.echo(banner)
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass


@adapter.command()
@click.option("--server", help="HOST:PORT of the IRC server (default: [adapters.irc] server).")
@click.option("--nick", help="The bot's nick (default: [adapters.irc] nick, 'agentd').")
@click.option(
    "--channel",
    "rooms",
    multiple=True,
    help="A room to join, repeatable: '#room', or '#room=CHANNEL' to name the agentd channel (default irc-<room>).",
)
@click.option("--tls/--no-tls", default=None, help="Connect with TLS (default: [adapters.irc] tls).")
@click.option("--all-messages", is_flag=True, default=None, help="Answer every room message, not only when addressed.")
@click.option("--persona", help="The persona that answers private messages naming none ([adapters.irc] persona).")
@click.option(
    "--voices/--no-voices",
    default=None,
    help="In a room of several personas each speaks with its own nick (default: [adapters.irc] voices, on).",
)
@click.option("--state", "state_file", type=click.Path(dir_okay=False), help="The adapter's state file.")
@click.option("--url", envvar="AGENTD_URL", help="The daemon (default: http://[daemon] host:port, or $AGENTD_URL).")
@pass_app
def irc(
    app: App,
    server: str | None,
    nick: str | None,
    rooms: tuple[str, ...],
    tls: bool | None,
    all_messages: bool | None,
    persona: str | None,
    voices: bool | None,
    state_file: str | None,
    url: str | None,
) -> None:
    """Bridge IRC rooms and private messages to agentd.

    In a room the persona answers when addressed: "NICK: question", or by a
    persona's name ("researcher: ...", "@researcher") when several are bound to
    the room's channel. A private message is answered in private (its own
    channel, dm-irc-<nick>). In a room bound to several personas each speaks
    with its own nick ([adapters.irc] nicks, default its name), and a private
    message to that nick is answered by that persona (dm-irc-<persona>-<nick>).
    Replies are delivered once each, across reconnects of either side and
    daemon restarts (the state file keeps the place). A message the daemon
    refuses is answered with a NOTICE saying what to do.
    """
    from agentd.adapters import run_adapter
    from agentd.adapters.irc import IrcAdapter, parse_room
    from agentd.client import AsyncAgentdClient

    cfg = app.config.adapters.irc
    spec = server or cfg.server
    if not spec:
        raise click.UsageError("no IRC server: give --server HOST:PORT or set [adapters.irc] server")
    use_tls = cfg.tls if tls is None else tls
    host, port = _server(spec, use_tls)
    try:
        mapping = dict(parse_room(r) for r in (rooms or tuple(cfg.channels)))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--channel") from None
    if state_file:
        state = Path(state_file)
    elif cfg.state_file:
        state = app.config.base_dir / cfg.state_file
    else:
        state = app.config.data_dir / "irc-adapter.json"
    base = url or cfg.daemon_url or daemon_url(app, None)
    password = os.environ.get(cfg.password_env) if cfg.password_env else None

    async def main() -> None:
        key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else app.config.daemon.api_key
        client = AsyncAgentdClient(base, key or None, busy_patience=0)  # the adapter retries, with notices
        bridge = IrcAdapter(
            client,
            state,
            host=host,
            port=port,
            nick=nick or cfg.nick,
            rooms=mapping,
            tls=use_tls,
            tls_verify=cfg.tls_verify,
            password=password,
            realname=cfg.realname,
            respond_all=cfg.respond == "all" if all_messages is None else all_messages,
            persona=persona or cfg.persona or None,
            nicks=dict(cfg.nicks),
            voices=cfg.voices if voices is None else voices,
        )
        await run_adapter(bridge)

    _run(f"agentd adapter irc: {host}:{port} {' '.join(mapping) or '(private messages only)'} -> {base}", main)


def _secrets(name: str, own: MatrixPersonaAccount) -> tuple[str | None, str | None]:
    """A persona account's access token and password, from the environment variables its section names."""
    token = os.environ.get(own.access_token_env) if own.access_token_env else None
    password = os.environ.get(own.password_env) if own.password_env else None
    if not token and not password:
        wanted = " or ".join(f"${v}" for v in (own.access_token_env, own.password_env) if v) or "none named"
        raise click.UsageError(
            f"[adapters.matrix.personas.{name}]: no credentials for {own.user_id} "
            f"(access_token_env or password_env names an environment variable to set: {wanted})"
        )
    return token or None, password or None


@adapter.command()
@click.option("--homeserver", help="The homeserver's URL (default: [adapters.matrix] homeserver).")
@click.option("--user", "user_id", help="The bot's user id, @name:server (default: [adapters.matrix] user_id).")
@click.option(
    "--room",
    "rooms",
    multiple=True,
    help="A room to join, repeatable: '#alias:server' or '!id:server', '=CHANNEL' to name the agentd channel.",
)
@click.option(
    "--invites",
    multiple=True,
    help="Accept invitations from these user ids (globs, repeatable; '*' anyone, 'none' no one).",
)
@click.option("--all-messages", is_flag=True, default=None, help="Answer every room message, not only when addressed.")
@click.option("--persona", help="The persona that answers direct messages naming none ([adapters.matrix] persona).")
@click.option("--state", "state_file", type=click.Path(dir_okay=False), help="The adapter's state file.")
@click.option("--url", envvar="AGENTD_URL", help="The daemon (default: http://[daemon] host:port, or $AGENTD_URL).")
@pass_app
def matrix(
    app: App,
    homeserver: str | None,
    user_id: str | None,
    rooms: tuple[str, ...],
    invites: tuple[str, ...],
    all_messages: bool | None,
    persona: str | None,
    state_file: str | None,
    url: str | None,
) -> None:
    """Bridge Matrix rooms and direct messages to agentd (pip install 'agentd[matrix]').

    The bot logs in with the access token or the password in the environment
    variables named by [adapters.matrix] access_token_env / password_env
    (AGENTD_MATRIX_TOKEN, AGENTD_MATRIX_PASSWORD): never a secret on the command
    line. In a room the persona answers when addressed (the bot's display name,
    "NAME: ...", a mention pill, or a persona's name); in a direct room, every
    message; in a thread, in the thread. Replies are Markdown, delivered once
    each across restarts of either side (the state file keeps the sync token).
    End-to-end encrypted rooms are refused with a notice. A persona given an
    account of its own ([adapters.matrix.personas.NAME]: user_id, and
    access_token_env or password_env) speaks in rooms as that Matrix user, and a
    direct message to that user is answered by the persona (dm-matrix-NAME-<user>).
    """
    try:
        from agentd.adapters.matrix import MatrixAdapter, PersonaAccount, parse_room
    except ImportError as exc:  # the optional extra is not installed
        raise click.UsageError(f"the Matrix adapter needs: pip install 'agentd[matrix]' ({exc})") from None
    from agentd.adapters import run_adapter
    from agentd.client import AsyncAgentdClient

    cfg = app.config.adapters.matrix
    server = homeserver or cfg.homeserver
    user = user_id or cfg.user_id
    if not server or not user:
        raise click.UsageError("give --homeserver URL and --user @name:server, or set them in [adapters.matrix]")
    token = os.environ.get(cfg.access_token_env) if cfg.access_token_env else None
    password = os.environ.get(cfg.password_env) if cfg.password_env else None
    if not token and not password:
        raise click.UsageError(
            f"no credentials: set ${cfg.access_token_env or 'AGENTD_MATRIX_TOKEN'} "
            f"or ${cfg.password_env or 'AGENTD_MATRIX_PASSWORD'} for {user}"
        )
    try:
        mapping = dict(parse_room(r) for r in (rooms or tuple(cfg.rooms)))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--room") from None
    accounts = {name: PersonaAccount(own.user_id, *_secrets(name, own)) for name, own in cfg.personas.items()}
    accepted = [i for i in (invites or tuple(cfg.invites)) if i != "none"]
    if state_file:
        state = Path(state_file)
    elif cfg.state_file:
        state = app.config.base_dir / cfg.state_file
    else:
        state = app.config.data_dir / "matrix-adapter.json"
    base = url or cfg.daemon_url or daemon_url(app, None)

    async def main() -> None:
        key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else app.config.daemon.api_key
        client = AsyncAgentdClient(base, key or None, busy_patience=0)  # the adapter retries, with notices
        bridge = MatrixAdapter(
            client,
            state,
            homeserver=server,
            user_id=user,
            access_token=token or None,
            password=password or None,
            rooms=mapping,
            invites=accepted,
            respond_all=cfg.respond == "all" if all_messages is None else all_messages,
            persona=persona or cfg.persona or None,
            accounts=accounts,
        )
        await run_adapter(bridge)

    _run(f"agentd adapter matrix: {user} on {server} {' '.join(mapping) or '(invitations only)'} -> {base}", main)
