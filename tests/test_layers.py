"""agentd's packages import one way, bottom up:

* layer 0: the root modules ``config``, ``personas`` and ``_exceptions`` (the two files an operator
  writes and the error catalogue, read by every layer); the packages ``text`` (words,
  quoting), ``files`` (shipped and cached files), ``timing`` (backoff, recurrence), ``observe`` (log,
  metrics, traces), ``web``, ``_compat``; and ``access.scopes``;
* layer 1: ``store``, ``llm``, ``embedders`` (with each model's calibration), ``client``;
* layer 2: ``search``, ``prompt``, ``memory``, ``recall``, ``skills``, ``mcp.client``, ``access``
  (identity, visibility), ``spend`` (usage, caps), ``timing.schedules``, ``ops`` (the operations);
* layer 3: ``runtime``, and ``app`` (the wiring; at the root, so a command that builds parts imports
  no runtime);
* layer 4: ``api``, ``cli``, ``adapters``, ``mcp.server``; layer 5: ``__main__``.

A package has one layer unless LAYERS names its parts (``mcp.client``, ``mcp.server``): then each part
(a sub-package or a module) is a unit of its own, with its own layer, and the package's ``__init__`` is
the unit named after the package. No two units import each other (directly or around a cycle), no two
files either, and runtime/'s parts import down its own layers. Every import counts: module level,
inside functions, and for type checking only."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "agentd"

#: Each unit's layer (a package, a root module, or a part of a package named ``package.part``); a unit may
#: import its own layer (without cycles) and the ones below.
LAYERS: dict[str, int] = {
    **dict.fromkeys(["_exceptions", "config", "personas", "web", "_compat"], 0),
    **dict.fromkeys(["text", "files", "timing", "observe", "access.scopes"], 0),
    **dict.fromkeys(["store", "llm", "embedders", "client"], 1),
    # The API's answer models, which the client returns: below the client's users, beside the operations' models.
    "schemas": 1,
    # recall imports memory and prompt (same layer; the cycle test keeps them from importing it back).
    **dict.fromkeys(
        ["prompt", "memory", "recall", "skills", "mcp.client", "access", "spend", "timing.schedules", "ops"], 2
    ),
    # search sits here too: memory, recall, prompt and skills import it, and the cycle test keeps it from
    # importing any of them (it needs only store and embedders; an embedder's calibration is embedders/').
    "search": 2,
    # The operations' models and their building blocks import nothing above layer 1: a client can use them.
    **dict.fromkeys(["ops.models", "ops.fields"], 1),
    # mcp/__init__.py is a docstring: it imports nothing.
    "mcp": 0,
    **dict.fromkeys(["app", "runtime"], 3),
    **dict.fromkeys(["api", "cli", "adapters", "mcp.server"], 4),
    "__main__": 5,
}


def unit_of(module: str) -> str:
    """The layered unit of a dotted name below ``agentd`` (``mcp.server.tools`` → ``mcp.server``,
    ``store.vectors`` → ``store``): the longest prefix LAYERS names, else the top-level name."""
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        if ".".join(parts[:end]) in LAYERS:
            return ".".join(parts[:end])
    return parts[0]


def _package_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return unit_of(".".join(parts)) if parts else "__init__"


def _imported(path: Path) -> set[str]:
    """The agentd units ``path`` imports (``agentd.store.vectors`` → ``store``, ``agentd.mcp.server.http``
    → ``mcp.server``), its own left out."""
    found: set[str] = set()
    own = _package_of(path)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            # ``from agentd.mcp.client import server`` imports the unit ``mcp.server``.
            if node.module.split(".")[0] == "agentd":
                names += [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "agentd" and len(parts) > 1:
                unit = unit_of(".".join(parts[1:]))
                if unit != own:
                    found.add(unit)
    found.discard("__version__")
    return found


def import_graph() -> dict[str, set[str]]:
    """Package → the packages it imports, over every module of agentd."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        package = _package_of(path)
        if package == "__init__":
            continue
        graph[package] |= {p for p in _imported(path) if p in LAYERS or (PACKAGE / p.replace(".", "/")).exists()}
    return graph


def test_every_package_has_a_layer() -> None:
    graph = import_graph()
    unknown = sorted(p for p in set(graph) | {q for deps in graph.values() for q in deps} if p not in LAYERS)
    assert not unknown, f"give these packages a layer in tests/test_layers.py: {unknown}"


def test_no_package_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{package} (layer {LAYERS[package]}) imports {dep} (layer {LAYERS[dep]})"
        for package, deps in sorted(import_graph().items())
        for dep in sorted(deps)
        if LAYERS[dep] > LAYERS[package]
    ]
    assert not upward, "imports run up the layers:\n" + "\n".join(upward)


def test_no_import_cycles_between_packages() -> None:
    graph = import_graph()
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str], on_path: set[str], done: set[str]) -> None:
        for dep in sorted(graph.get(node, ())):
            if dep in on_path:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in done:
                visit(dep, [*path, dep], on_path | {dep}, done)
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        if start not in done:
            visit(start, [start], {start}, done)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", ["config", "access.scopes", "text", "_exceptions", "files", "_compat"])
def test_the_bottom_layer_imports_nothing_above_it(package: str) -> None:
    assert all(LAYERS[dep] == 0 for dep in import_graph().get(package, ())), import_graph()[package]


def _module_of(path: Path) -> str:
    """``agentd/runtime/events.py`` → ``agentd.runtime.events``; a package's ``__init__`` is the package."""
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, set[str]]:
    """Module → the agentd modules it imports, over every file of agentd (every import counts: module
    level, inside functions, for type checking only). ``from agentd.x import y`` imports the module
    ``agentd.x.y`` when there is one, else ``agentd.x``."""
    modules = {_module_of(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in modules else node.module)
        found.discard(name)
        graph[name] = found
    return graph


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in index:
                connect(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for start in sorted(graph):
        if start not in index:
            connect(start)
    return sorted(groups)


def test_no_import_cycles_between_modules() -> None:
    """No two files of agentd import each other, directly or around a circle (lazy imports too)."""
    cycles = module_cycles(module_graph())
    assert not cycles, "file-level import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above would see a circle of three modules, and only that one."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert module_cycles(graph) == [["a", "b", "c"]]


#: runtime/'s own layers, bottom up: a module imports no runtime module of a higher one.
RUNTIME_LAYERS: dict[str, int] = {
    **dict.fromkeys(["events", "messages", "group_commit", "inflight"], 0),
    **dict.fromkeys(["admission", "acting", "rooms"], 0),
    "pipeline": 1,
    **dict.fromkeys(["dispatch", "approvals"], 2),
    **dict.fromkeys(["actors", "intake"], 3),
    # The scheduler fires through the intake, whatever the dispatcher.
    **dict.fromkeys(["scaleout", "scheduler"], 4),
    **dict.fromkeys(["runtime", "__init__"], 5),
}


def _runtime_part(module: str) -> str:
    """``agentd.runtime.pipeline.turn`` → ``pipeline``; ``agentd.runtime`` → ``__init__``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def test_runtime_modules_import_down_its_own_layers() -> None:
    """The turn pipeline knows nothing of the actors, the actors nothing of scale-out, and nothing
    below the intake knows which dispatcher was chosen."""
    graph = module_graph()
    runtime = {m: deps for m, deps in graph.items() if m.startswith("agentd.runtime")}
    unknown = sorted({_runtime_part(m) for m in runtime} - set(RUNTIME_LAYERS))
    assert not unknown, f"give these parts of runtime/ a layer in tests/test_layers.py: {unknown}"
    upward = [
        f"{module} imports {dep}"
        for module, deps in sorted(runtime.items())
        for dep in sorted(deps)
        if dep.startswith("agentd.runtime")
        and RUNTIME_LAYERS[_runtime_part(dep)] > RUNTIME_LAYERS[_runtime_part(module)]
    ]
    assert not upward, "runtime/ imports run up its layers:\n" + "\n".join(upward)


# -- around agentd: tests/, bench/ and testkit/ ----------------------------------------------------------

#: What each top-level tree of the repository may import of the others: tests/ and bench/ share testkit/
#: and never import each other; testkit/ imports agentd only; agentd imports none of them.
MAY_IMPORT: dict[str, set[str]] = {
    "agentd": set(),
    "testkit": {"agentd"},
    "tests": {"agentd", "testkit"},
    "bench": {"agentd", "testkit"},
}


def _top_level_imports(path: Path) -> set[str]:
    """The modules ``path`` imports (every import, by its full dotted name), and the files it loads by path
    or puts on ``sys.path`` (``importlib.util.spec_from_file_location``, ``sys.path.insert``), as
    ``<file>``: their text names the repository's directories, so those lines are kept whole."""
    found: set[str] = set()
    text = path.read_text(encoding="utf-8")
    # A relative import (``from .test_x import y``) is named from the file's own package.
    package = path.parent.relative_to(REPO).parts if path.is_relative_to(REPO) else (path.parent.name,)
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.level or node.module):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}
    found |= {f"<file> {line.strip()}" for line in text.splitlines() if "spec_from_file_location(" in line}
    found |= {f"<file> {line.strip()}" for line in text.splitlines() if "sys.path.insert(" in line}
    return found


def crossings(tree: str) -> list[str]:
    """The imports in ``tree`` (a top-level directory) of another tree it may not import, and in tests/ of
    another test module (``tests.test_*``: shared helpers live in tests/support/)."""
    bench_modules = {p.stem for p in (REPO / "bench").glob("*.py")}
    forbidden = set(MAY_IMPORT) - MAY_IMPORT[tree] - {tree}
    found: list[str] = []
    for path in sorted((REPO / tree).rglob("*.py")):
        for name in sorted(_top_level_imports(path)):
            head = name.split(".")[0]
            is_file = name.startswith("<file>")
            wrong = head in forbidden or (tree == "tests" and head in bench_modules)
            wrong |= tree == "tests" and name.startswith("tests.test_")
            wrong |= is_file and any(f"/ {other!r}" in name or f'"{other}"' in name for other in forbidden)
            if wrong:
                found.append(f"{path.relative_to(REPO)}: {name}")
    return found


@pytest.mark.parametrize("tree", sorted(MAY_IMPORT))
def test_tests_bench_and_testkit_import_only_what_they_may(tree: str) -> None:
    """No test module imports another, tests/ and bench/ never import each other (nor load each other's
    files by path), testkit/ imports neither, and agentd none of the three."""
    found = crossings(tree)
    assert not found, f"{tree}/ imports what it may not (see MAY_IMPORT in tests/test_layers.py):\n" + "\n".join(found)


def test_the_crossing_check_sees_a_test_importing_a_test_and_a_bench_file(tmp_path: Path) -> None:
    """The check above reads what these lines import as the crossings they are."""
    path = tmp_path / "tests" / "t.py"
    path.parent.mkdir()
    path.write_text(
        "from tests.test_serve import Serve\nimport tests.support\n"
        "from .test_api import client\nfrom . import test_web\n"
        "spec = spec_from_file_"  # split: this file's own text is checked too
        'location("x", REPO / "bench" / "locomo.py")\n'
    )
    found = _top_level_imports(path)
    assert "tests.test_serve" in found
    assert "tests.support" in found
    assert {"tests.test_api", "tests.test_web"} <= found  # relative imports, named from the package
    assert any(name.startswith("<file>") and '"bench"' in name for name in found)


def backend_checks(path: Path) -> list[str]:
    """Where ``path`` asks which database the store is (``.backend``, ``.dialect``, or a comparison with
    ``"sqlite"`` / ``"postgresql"``) instead of what it can do (``store.capabilities``)."""
    found: list[str] = []
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ("backend", "dialect"):
            found.append(f"{where}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Compare):
            names = [c.value for c in (node.left, *node.comparators) if isinstance(c, ast.Constant)]
            if {"sqlite", "postgresql"} & set(names):
                found.append(f"{where}:{node.lineno}: compares with {names}")
    return found


@pytest.mark.parametrize("package", ["runtime", "prompt"])
def test_the_runtime_and_the_prompt_ask_the_store_what_it_can_do_not_what_it_is(package: str) -> None:
    found = [f for path in sorted((PACKAGE / package).rglob("*.py")) for f in backend_checks(path)]
    assert not found, "ask store.capabilities (agentd/store/capabilities.py) instead:\n" + "\n".join(found)


def test_the_backend_check_finds_a_backend_check(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text('if store.backend == "sqlite":\n    pass\nif conn.dialect.name == "postgresql":\n    pass\n')
    assert len(backend_checks(path)) == 4


# -- one name per class ------------------------------------------------------------------------------

#: The client's exceptions (agentd/client/errors.py) mirror the error catalogue over the wire, one
#: class per code named ``<Code>Error``: where a code's own name ends in "Error" (``store_error``),
#: its class has the catalogue's name (``StoreError``) on purpose. The rest of agentd names each
#: class once.
MIRRORS = PACKAGE / "client" / "errors.py"


def class_definitions(paths: list[Path]) -> dict[str, list[str]]:
    """Class name → where each class of that name is defined (``path:line``), over ``paths``."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{where}:{node.lineno}")
    return found


def test_each_class_name_is_defined_once() -> None:
    """Two classes of one name (two ``Caller``s, two ``Reply``s) make a reader ask which is meant:
    each class in agentd has a name of its own that says what it is."""
    paths = [p for p in sorted(PACKAGE.rglob("*.py")) if p != MIRRORS]
    repeated = {name: where for name, where in class_definitions(paths).items() if len(where) > 1}
    assert not repeated, "class names defined more than once (rename one):\n" + "\n".join(
        f"{name}: {', '.join(where)}" for name, where in sorted(repeated.items())
    )


def test_the_class_check_sees_a_repeated_name(tmp_path: Path) -> None:
    """The check above finds a class defined in two files."""
    (tmp_path / "a.py").write_text("class Reply:\n    pass\n")
    (tmp_path / "b.py").write_text("class Other:\n    class Reply:\n        pass\n")
    found = class_definitions([tmp_path / "a.py", tmp_path / "b.py"])
    assert len(found["Reply"]) == 2
    assert len(found["Other"]) == 1
