"""``agentd init``: a config file and personas to start from."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from agentd.files.shipped import example_config, example_personas


@click.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite files that exist.")
def init(directory: Path, force: bool) -> None:
    """Write an annotated agentd.toml and the example personas into DIR.

    DIR defaults to the current directory. agentd.toml lists every key with its
    default and a comment; personas/ holds the example personas (buddy,
    researcher) on the offline model, ready to point at a real one. Existing
    files are kept unless --force is given. agentd reads ./agentd.toml, so run
    agentd from DIR, or give --config DIR/agentd.toml (or set AGENTD_CONFIG);
    `agentd init ~/.config/agentd` makes it the user's own, read from anywhere.
    """
    config = directory / "agentd.toml"
    personas = directory / "personas"
    sources = [(example_config(), config)]
    sources += [(src, personas / src.name) for src in sorted(example_personas().glob("*.toml"))]
    existing = [dest for _src, dest in sources if dest.exists()]
    if existing and not force:
        names = ", ".join(str(p) for p in existing)
        click.echo(f"error: {names} already exist(s); nothing was written (--force overwrites)", err=True)
        sys.exit(1)
    try:
        personas.mkdir(parents=True, exist_ok=True)
        for src, dest in sources:
            shutil.copyfile(src, dest)
    except OSError as exc:
        click.echo(f"error: cannot write to {directory}: {exc.strerror}", err=True)
        sys.exit(1)
    click.echo(f"wrote {config} and {len(sources) - 1} personas in {personas}")
    where = "" if directory.resolve() == Path.cwd() else f" --config {config}"
    click.echo(f"next: agentd{where} chat buddy --message hello")
