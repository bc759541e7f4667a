"""``agentd keys``: API keys with roles (admin, adapter, service, metrics), stored hashed."""

from __future__ import annotations

import click

from agentd.api.keys import KeyBook, Role
from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json


@click.group()
def keys() -> None:
    """API keys with roles: create, list, revoke.

    \b
    admin    everything (the config's [daemon] api_key is an admin key too)
    adapter  post to, read and follow the channels its globs match; chat there as its own users
             (--users, default its network's: --channels 'irc-*' acts for 'irc:*')
    service  /v1/memory/search and /v1/memory/context for any user, read-only;
             /v1/schedules for the user each call names
    """


@keys.command()
@click.option("--role", type=click.Choice([r.value for r in Role]), required=True, help="What the key may do.")
@click.option(
    "--channels",
    "channels",
    multiple=True,
    help="Channel globs an adapter key may use (repeat, or separate with spaces: --channels 'irc-*').",
)
@click.option(
    "--users",
    "users",
    multiple=True,
    help="User ids or globs an adapter key may post and chat as (repeat, or separate with spaces: "
    "--users 'irc:*'); default: the users of the network its channel globs name (irc-* → irc:*).",
)
@click.option("--name", help="A name to recognise the key by (default: ROLE-xxxxxx).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def create(
    app: App, role: str, channels: tuple[str, ...], users: tuple[str, ...], name: str | None, as_json: bool
) -> None:
    """Make a key; its token is printed once and only its hash is stored."""
    globs = [g for given in channels for g in given.split()]
    people = [u for given in users for u in given.split()]
    made = KeyBook(app.store).create(role, name, globs, people)
    if as_json:
        print_json({**made.key.as_json(), "token": made.token})
        return
    click.echo(made.token)
    where = f" for channels {', '.join(made.key.channels)}" if made.key.channels else ""
    if made.key.users:
        where += f" as users {', '.join(made.key.users)}"
    click.echo(
        f"key {made.key.id} ({made.key.name}, {made.key.role}{where}) created; the token above is shown only "
        "once: send it as 'Authorization: Bearer <token>'",
        err=True,
    )


@keys.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def list_keys(app: App, as_json: bool) -> None:
    """Every key: id, name, role, channels, created, revoked (never the token)."""
    found = KeyBook(app.store).list()
    if as_json:
        print_json([k.as_json() for k in found])
        return
    if not found:
        out.print("no keys; make one with: agentd keys create --role admin|adapter|service|metrics")
        return
    for k in found:
        state = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "active"
        globs = f"  channels: {', '.join(k.channels)}" if k.channels else ""
        if k.role == "adapter":
            globs += f"  users: {', '.join(k.users) if k.users is not None else 'derived from channels'}"
        out.print(f"{k.id:>4}  {k.name}  {k.role}  created {k.created_at:%Y-%m-%d %H:%M}  {state}{globs}")


@keys.command()
@click.argument("key")
@pass_app
def revoke(app: App, key: str) -> None:
    """Revoke KEY (its id, or its name); a running daemon refuses it at once."""
    gone = KeyBook(app.store).revoke(key)
    click.echo(f"key {gone.id} ({gone.name}, {gone.role}) revoked")
