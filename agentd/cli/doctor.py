"""``agentd doctor``: is everything agentd needs here and working?

Without ``--ping`` nothing is sent anywhere and litellm is not imported: each
persona's key variable is checked against the providers agentd knows. With
``--ping`` each persona's model gets a one-token request, all at once, each
bounded by ``--timeout``, and the report gives its latency or the exact error.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from agentd._exceptions import AgentdError, EmbeddingMismatch
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json

if TYPE_CHECKING:
    from agentd.app import App
    from agentd.personas import Persona


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    ok: bool
    detail: str
    #: Passes, but worth a look (a model litellm does not know).
    warning: bool = False


def _driver() -> str:
    import sqlean

    conn = sqlean.connect(":memory:")
    conn.enable_load_extension(True)
    conn.close()
    return f"sqlean.py, SQLite {sqlean.sqlite_version}, extension loading available"


def _sqlite_vec() -> str:
    import sqlean

    from agentd.store.engine import vec0_path

    conn = sqlean.connect(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(vec0_path())
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


def _credentials(p: Persona) -> Check:
    """Whether ``p``'s model has the key it needs, told without litellm."""
    from agentd.llm.models import key_variables
    from agentd.llm.offline import is_offline

    name = f"llm {p.name}"
    if is_offline(p.model):
        return Check(name, True, f"{p.model}: the built-in offline model, no key needed")
    if p.api_key_env:
        present = bool(os.environ.get(p.api_key_env))
        return Check(name, present, f"{p.model}: {p.api_key_env} " + ("is set" if present else "is not set"))
    if p.api_base:
        return Check(name, True, f"{p.model} at {p.api_base}: no key variable needed (a placeholder is sent)")
    variables = key_variables(p.model)
    if variables is None:
        return Check(name, True, f"{p.model}: key not checked for this provider (`agentd doctor --ping` calls it)")
    if any(os.environ.get(v) for v in variables):
        return Check(name, True, f"{p.model}: {' or '.join(variables)} is set")
    return Check(name, False, f"{p.model}: needs {' or '.join(variables)}, which is not set")


def ping_model(p: Persona, timeout: float) -> Check:
    """Send ``p``'s model a one-token request; its latency, or the exact error."""
    from agentd.llm.chat import LitellmChat, ModelSettings

    settings = ModelSettings(
        model=p.model, max_tokens=1, api_base=p.api_base, api_key_env=p.api_key_env, timeout=timeout
    )
    start = time.perf_counter()
    try:
        LitellmChat().stream(settings, [{"role": "user", "content": "Say OK."}], [], lambda _text: None)
    except AgentdError as exc:  # agentd's model errors name the model already
        text = str(exc)
        return Check(f"ping {p.name}", False, text if p.model in text else f"{p.model}: {text}")
    except Exception as exc:  # a doctor reports every failure instead of crashing
        return Check(f"ping {p.name}", False, f"{p.model}: {type(exc).__name__}: {exc}")
    ms = (time.perf_counter() - start) * 1000
    return Check(
        f"ping {p.name}",
        True,
        f"{p.model}" + (f" at {p.api_base}" if p.api_base else "") + f": answered in {ms:.0f} ms",
    )


def ping_all(personas: list[Persona], timeout: float) -> list[Check]:
    """Ping every persona's model at once; one that has not answered by ``timeout`` (plus a
    second of slack) is reported as such, whatever the client library does."""
    from agentd.llm.offline import is_offline

    if any(not is_offline(p.model) for p in personas):
        from agentd.llm import litellm_module

        litellm_module()  # imported (seconds) before the clocks start: not the model's time
    results: dict[str, Check] = {}
    lock = threading.Lock()

    def run(p: Persona) -> None:
        check = ping_model(p, timeout)
        with lock:
            results[p.name] = check

    threads = [threading.Thread(target=run, args=(p,), daemon=True, name=f"ping-{p.name}") for p in personas]
    deadline = time.monotonic() + timeout + 1.0
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return [
            results.get(p.name) or Check(f"ping {p.name}", False, f"{p.model}: no answer within {timeout:g} s")
            for p in personas
        ]


def _mcp_servers(app: App) -> list[Check]:
    """Each MCP server a persona lists: started now (all at once), with its tools or why it cannot run."""
    from agentd.cli.personas import mcp_status

    checks = []
    for name, status in mcp_status(app).items():
        users = ", ".join(p.name for p in app.personas.values() if name in p.mcp_servers)
        if status["up"]:
            tools = ", ".join(status["tools"]) or "none"
            checks.append(Check(f"mcp {name}", True, f"for {users}: {len(status['tools'])} tools ({tools})"))
        else:
            checks.append(Check(f"mcp {name}", False, f"for {users}: cannot be started or reached: {status['error']}"))
    return checks


def _embedder(app: App) -> str:
    """The embedder: loaded, its weights checked, one query timed."""
    emb = app.embedder
    if emb is None:
        return "none configured: automatic retrieval and recall are off"
    start = time.perf_counter()
    load = getattr(emb, "load", None)
    if load is not None:  # a local model: loaded (and its weights checked) on first use
        load()
    loaded = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    emb.embed(["doctor probe"])
    ms = (time.perf_counter() - start) * 1000
    return (
        f"{emb.model_id}, {emb.dimension}-d, loaded in {loaded:.0f} ms (weights checked by sha256), "
        f"one query in {ms:.1f} ms"
    )


def _startup(app: App) -> str:
    """What ``agentd serve`` checks before it listens, by the same code: its error, or where the config is."""
    from agentd.api.preflight import check_startup

    check_startup(app, app.config.daemon.host)
    return app.config.where


def _known_model(p: Persona) -> Check | None:
    """A warning when litellm does not know ``p``'s model (no api_base: a server of one's own names its own)."""
    from agentd.llm.models import model_info
    from agentd.llm.offline import is_offline

    if is_offline(p.model) or p.api_base or model_info(p.model) is not None:
        return None
    return Check(
        f"model {p.name}",
        True,
        f"litellm does not know the model {p.model!r}: check its spelling (provider/NAME); "
        "`agentd doctor --ping` calls it",
        warning=True,
    )


def _deprecated_keys(messages: Iterable[str]) -> list[Check]:
    """A warning for each renamed key the config or a persona file still uses (read as the new one)."""
    return [Check("deprecated key", True, message, warning=True) for message in messages]


def checks(app: App, ping_timeout: float | None = None) -> list[Check]:
    """Every check, in order; later ones are skipped when what they need failed.

    ``ping_timeout``: also send each persona's model a one-token request, bounded by it.
    """
    found = [
        _run("config", lambda: _startup(app)),
        Check("data directory", True, str(app.config.data_dir)),
    ]
    found += _deprecated_keys(app.config.deprecations)
    if app.config.ignored_env:
        found.append(
            Check(
                "environment",
                True,
                f"ignored (not settings agentd reads): {', '.join(app.config.ignored_env)}; "
                "overrides are spelled AGENTD_<SECTION>__<KEY>",
            )
        )
    found += [
        _run("sqlite driver", _driver),
        _run("sqlite-vec", _sqlite_vec),
    ]

    found.append(_run("embedder", lambda: _embedder(app)))

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
            revision, head = migrate.current_revision(engine), migrate.scripted_head() or migrate.head_revision()
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
        found += [_credentials(p) for p in app.personas.values()]
        found += [c for c in (_known_model(p) for p in app.personas.values()) if c is not None]
        found += _deprecated_keys(m for p in app.personas.values() for m in p.deprecations)
        found += _mcp_servers(app)
        if ping_timeout is not None:
            found += ping_all(list(app.personas.values()), ping_timeout)
    return found


@click.command()
@click.option("--ping", is_flag=True, help="Also send each persona's model a one-token request.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=20.0,
    show_default=True,
    help="Seconds each --ping may take.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def doctor(app: App, ping: bool, timeout: float, as_json: bool) -> None:
    """Check that everything agentd needs is here and working.

    The config, the data directory, the SQLite driver and sqlite-vec, the embedder,
    the database, and each persona's model key; with --ping, that each persona's
    model answers. Exits 1 when a check fails.
    """
    report = checks(app, timeout if ping else None)
    if as_json:
        rows = [{"check": c.name, "ok": c.ok, "detail": c.detail} for c in report]
        print_json([{**row, "warning": True} if c.warning else row for row, c in zip(rows, report, strict=True)])
    else:
        from rich.table import Table

        table = Table("check", "", "detail")
        for c in report:
            mark = "[red]FAIL[/]" if not c.ok else "[yellow]warn[/]" if c.warning else "[green]ok[/]"
            table.add_row(c.name, mark, c.detail)
        out.print(table)
    if not all(c.ok for c in report):
        sys.exit(1)
