"""``agentd doctor``: is everything agentd needs here and working?"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import click
from rich.table import Table

from agentd._exceptions import AgentdError, EmbeddingMismatch
from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    ok: bool
    detail: str


def _driver() -> str:
    import sqlean

    conn = sqlean.connect(":memory:")
    conn.enable_load_extension(True)
    conn.close()
    return f"sqlean.py, SQLite {sqlean.sqlite_version}, extension loading available"


def _sqlite_vec() -> str:
    import sqlean
    import sqlite_vec

    conn = sqlean.connect(":memory:")
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    version = conn.execute("SELECT vec_version()").fetchone()[0]
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    conn.close()
    return f"sqlite-vec {version} loads; FTS5 available"


def _run(name: str, probe: Callable[[], str]) -> Check:
    try:
        return Check(name, True, probe())
    except (AgentdError, ImportError, OSError, RuntimeError, ValueError) as exc:
        return Check(name, False, str(exc))
    except Exception as exc:  # a doctor reports every failure instead of crashing
        return Check(name, False, f"{type(exc).__name__}: {exc}")


#: Ids shown in the report; the rest are counted.
SHOWN_IDS = 20


def _vectors(app: App) -> Check | None:
    """Stored vectors that are not finite unit vectors of the store's dimension (read-only)."""
    from agentd.store import Store
    from agentd.store.engine import create_engine, sqlite_path

    url = app.config.database_url
    path = sqlite_path(url)
    if path is not None and not path.exists():
        return None
    engine = create_engine(url, app.config.database.busy_timeout_ms)
    try:
        store = Store(engine, url)
        space = store.embedding_space()
        if space is None:
            return None
        with store.read() as conn:
            bad = store.vectors.invalid(conn, space.dimension)
    except AgentdError as exc:
        return Check("vectors", False, str(exc))
    finally:
        engine.dispose()
    if not bad:
        return Check("vectors", True, f"every stored vector is a finite {space.dimension}-d unit vector")
    shown = ", ".join(str(i) for i in bad[:SHOWN_IDS]) + (
        f" and {len(bad) - SHOWN_IDS} more" if len(bad) > SHOWN_IDS else ""
    )
    return Check(
        "vectors",
        False,
        f"{len(bad)} stored vectors are not finite {space.dimension}-d unit vectors (memories {shown}); "
        "searches skip them: run `agentd memory reembed` to rewrite them",
    )


def checks(app: App) -> list[Check]:
    """Every check, in order; later ones are skipped when what they need failed."""
    found = [
        Check("config", True, app.config.source),
        _run("sqlite driver", _driver),
        _run("sqlite-vec", _sqlite_vec),
    ]

    def embedder() -> str:
        emb = app.embedder
        if emb is None:
            return "none configured: automatic retrieval and recall are off"
        start = time.perf_counter()
        emb.embed(["doctor probe"])
        ms = (time.perf_counter() - start) * 1000
        return f"{emb.model_id}, {emb.dimension}-d, one query in {ms:.1f} ms (weights checked by sha256)"

    found.append(_run("embedder", embedder))

    def database() -> str:
        # Only read: a missing database is not created, an old one is not upgraded, the
        # embedding model is not bound (`agentd db upgrade`, `agentd memory reembed` do that).
        from agentd.store import Store, migrate
        from agentd.store.engine import create_engine, sqlite_path

        url = app.config.database_url
        path = sqlite_path(url)
        if path is not None and not path.exists():
            return f"no database yet at {path} (it is created on first use)"
        engine = create_engine(url, app.config.database.busy_timeout_ms)
        try:
            revision, head = migrate.current_revision(engine), migrate.head_revision()
            if revision != head:
                return f"{url} at revision {revision or 'none'}; {head} is pending (`agentd db upgrade`)"
            store = Store(engine, url)
            space = store.embedding_space()
            with store.read() as conn:
                count = store.memories.count(conn)
        finally:
            engine.dispose()
        emb = app.embedder
        if emb is not None and space is not None and (space.model_id, space.dimension) != (emb.model_id, emb.dimension):
            raise EmbeddingMismatch(space.model_id, space.dimension, emb.model_id, emb.dimension)
        vectors = f"vectors of {space.model_id}" if space else "no vectors yet"
        return f"{url} at revision {revision}; {count} memories; {vectors}"

    found.append(_run("database", database))
    vectors_check = _vectors(app)
    if vectors_check is not None:
        found.append(vectors_check)

    def personas() -> str:
        return ", ".join(f"{p.name} ({p.model})" for p in app.personas.values()) or "none"

    personas_check = _run("personas", personas)
    found.append(personas_check)
    if personas_check.ok:
        from agentd.llm.models import missing_credentials

        for p in app.personas.values():
            missing = missing_credentials(p.model, p.api_key_env)
            detail = f"{p.model}: " + (f"missing {', '.join(missing)}" if missing else "credentials present")
            found.append(Check(f"llm {p.name}", not missing, detail))
    return found


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def doctor(app: App, as_json: bool) -> None:
    """Check the driver, sqlite-vec, the embedder, the database and LLM credentials."""
    report = checks(app)
    if as_json:
        print_json([{"check": c.name, "ok": c.ok, "detail": c.detail} for c in report])
    else:
        table = Table("check", "", "detail")
        for c in report:
            table.add_row(c.name, "[green]ok[/]" if c.ok else "[red]FAIL[/]", c.detail)
        out.print(table)
    if not all(c.ok for c in report):
        sys.exit(1)
