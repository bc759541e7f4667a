"""The repository's own habits, checked rather than remembered.

- The pre-commit hooks (``.pre-commit-config.yaml``) run what CI (``.ci/run``) runs: each check of
  CI is a local hook, and each hook is one of CI's checks (the fast tier: the test command with
  ``-m fast``). Both files are parsed, so a command changed in one and not the other fails here.
- The version is kept in one place (``agentd.__version__``; the wheel reads it) and agrees with
  CHANGELOG.md: between releases a ``.devN`` of a release not yet made, else a released section.
- Every file of the repository that its text names by path (``bench/daemon.py``, or a test as
  ``tests/<module>.py::<test>``) is in it.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.version import InvalidVersion, Version

import agentd
from tests.support import REPO

# -- pre-commit runs what CI runs -----------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One shell command: the environment it sets (``VAR=value``) and its words."""

    env: frozenset[str]
    argv: tuple[str, ...]


def command(text: str) -> Command:
    """``text`` (``[env] [VAR=value ...] program args``) as a :class:`Command`."""
    words = shlex.split(text)
    if words[:1] == ["env"]:
        words = words[1:]
    env = []
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        env.append(words.pop(0))
    return Command(frozenset(env), tuple(words))


def ci_checks(script: str) -> list[Command]:
    """The checks ``.ci/run`` makes: its commands (lines split at ``&&``) that run a program of the
    project's virtualenv, except pip (which installs, and checks nothing)."""
    found = []
    for line in script.splitlines():
        if line.strip().startswith("#"):
            continue
        for part in line.split("&&"):
            if ".venv/bin/" not in part:
                continue
            cmd = command(part)
            if cmd.argv and cmd.argv[0].startswith(".venv/bin/") and cmd.argv[0] != ".venv/bin/pip":
                found.append(cmd)
    return found


def essence(argv: tuple[str, ...], fast: bool = False) -> tuple[str, ...]:
    """What a command checks, without what only says where (``.``: the files, which pre-commit passes
    instead; ``--force-exclude``: the same excludes for the files passed; ``-d DIR``: where the site is
    written). With ``fast``, ``-m fast`` too: the fast tier is the test command on a subset."""
    out: list[str] = []
    words = iter(argv)
    for word in words:
        if word in (".", "--force-exclude"):
            continue
        if word == "-d":
            next(words, None)
            continue
        if fast and word == "-m":
            marker = next(words, None)
            if marker == "fast":
                continue
            out += [word, marker or ""]
            continue
        out.append(word)
    return tuple(out)


def hook_problems(script: str, config: str) -> list[str]:
    """Where the hooks of ``config`` and the checks of ``script`` (.ci/run) part ways (empty: nowhere)."""
    data: dict[str, Any] = yaml.safe_load(config)
    problems: list[str] = []
    hooks: dict[str, tuple[Command, list[str]]] = {}
    for repo in data.get("repos", []):
        if repo.get("repo") != "local":
            problems.append(f"repo {repo.get('repo')!r}: only local hooks (nothing fetched)")
        for hook in repo.get("hooks", []):
            if hook.get("language") != "system":
                problems.append(f"hook {hook['id']}: language {hook.get('language')!r}, not system")
            hooks[hook["id"]] = (command(hook["entry"]), hook.get("stages", ["pre-commit", "pre-push", "manual"]))
    checks = ci_checks(script)
    if not checks:
        problems.append(".ci/run: no check found")
    for ci in checks:
        # Each of CI's checks, exactly, in the stage `pre-commit run --hook-stage manual` runs.
        if not any(
            ci.env <= h.env and essence(h.argv) == essence(ci.argv) and "manual" in stages
            for h, stages in hooks.values()
        ):
            problems.append(f"CI runs {shlex.join(ci.argv)!r}: no manual-stage hook runs it")
    for hook_id, (h, _) in hooks.items():
        if not any(ci.env <= h.env and essence(h.argv, fast=True) == essence(ci.argv) for ci in checks):
            problems.append(f"hook {hook_id} runs {shlex.join(h.argv)!r}: not one of CI's checks")
    fast = [i for i, (h, s) in hooks.items() if "fast" in h.argv and "pre-push" in s]
    if not fast:
        problems.append("no hook runs the fast tier (pytest -m fast) on push")
    every_commit = {shlex.join(essence(h.argv)) for h, s in hooks.values() if "pre-commit" in s}
    for ci in checks:
        tool = ci.argv[0].rsplit("/", 1)[-1]
        if tool in ("ruff", "mypy") and shlex.join(essence(ci.argv)) not in every_commit:
            problems.append(f"{shlex.join(ci.argv)!r} does not run on every commit")
    return problems


def test_the_pre_commit_hooks_run_what_ci_runs() -> None:
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    config = (REPO / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    assert len(ci_checks(script)) >= 5  # the tests, ruff check, ruff format, mypy, mkdocs
    assert hook_problems(script, config) == []


def test_the_hook_check_sees_a_hook_that_drifts_from_ci() -> None:
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    config = (REPO / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    assert "entry: .venv/bin/mypy agentd\n" in config
    narrowed = config.replace("entry: .venv/bin/mypy agentd\n", "entry: .venv/bin/mypy agentd/api\n")
    assert any("mypy agentd/api" in p for p in hook_problems(script, narrowed))
    assert any("mypy agentd'" in p for p in hook_problems(script, narrowed))
    stricter_ci = script.replace(".venv/bin/ruff check .", ".venv/bin/ruff check --preview .")
    assert any("--preview" in p for p in hook_problems(stricter_ci, config))
    no_browser = config.replace("env AGENTD_REQUIRE_BROWSER=1 ", "")
    assert any("pytest -q': no manual-stage hook" in p for p in hook_problems(script, no_browser))
    fetched = config.replace("- repo: local", "- repo: https://github.com/astral-sh/ruff-pre-commit")
    assert any("only local hooks" in p for p in hook_problems(script, fetched))


# -- one version, and the changelog agrees ---------------------------------------------------------------


def version_problems(version: str, changelog: str) -> list[str]:
    """Where ``version`` and ``changelog`` disagree: a version is a ``.devN`` of a release newer than
    every released section, or is the newest released section (``## [X.Y.Z] - YYYY-MM-DD``)."""
    try:
        v = Version(version)
    except InvalidVersion:
        return [f"{version!r} is not a PEP 440 version"]
    if "\n## [Unreleased]\n" not in changelog:
        return ["CHANGELOG.md has no ## [Unreleased] section"]
    released = [Version(m) for m in re.findall(r"^## \[(\d[^\]]*)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)]
    newest = max(released, default=None)
    if v.is_devrelease:
        if newest is not None and Version(v.base_version) <= newest:
            return [f"{version} is a development version of {v.base_version}, released already ({newest})"]
        return []
    if v != newest:
        return [f"{version} is a release, but the newest released section of CHANGELOG.md is {newest}"]
    return []


def test_the_version_is_kept_in_one_place_and_agrees_with_the_changelog() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "agentd/__init__.py"
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert version_problems(agentd.__version__, changelog) == []
    # Nowhere else is the version written out (the API, MCP and the CLI import it).
    elsewhere = [
        str(p.relative_to(REPO))
        for p in [*(REPO / "agentd").rglob("*.py"), *(REPO / "docs").rglob("*.md"), REPO / "README.md"]
        if p != REPO / "agentd" / "__init__.py" and agentd.__version__ in p.read_text(encoding="utf-8")
    ]
    assert elsewhere == []


def test_the_version_check_sees_a_version_the_changelog_contradicts() -> None:
    released = "# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2026-12-01\n\n## [0.1.0] - 2026-01-01\n"
    assert version_problems("0.3.0.dev0", released) == []
    assert version_problems("0.2.0", released) == []
    assert version_problems("0.2.0.dev3", released)  # a build after the release claims to precede it
    assert version_problems("0.3.0", released)  # a release without its section
    assert version_problems("0.3.0.dev0", released.replace("## [Unreleased]\n", ""))
    assert version_problems("latest", released)


# -- every path the repository names is in it ------------------------------------------------------------

#: The top-level directories the text of the repository names files in.
TREES = ("agentd", "bench", "docs", "examples", "migrations", "personas", "testkit", "tests")
#: A path into one of them, not part of a longer path or a URL (``/docs/...``, ``my-agentd/...``),
#: with an optional ``::name`` (a test or a class in it).
PATH = re.compile(rf"(?<![\w./~@-])((?:{'|'.join(TREES)})/[\w./-]*\w)(?:::(\w+))?")
#: The files read for paths: text a reader reads (code, docs, config), not data.
TEXT = {".py", ".md", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".ini", ".service", ".mako", ".sh", ".html", ".js"}


def texts() -> list[Path]:
    """The repository's text files (as :data:`TEXT`) outside what git ignores."""
    top = [REPO / n for n in ("README.md", "CHANGELOG.md", "agentd.toml", "pyproject.toml", "mkdocs.yml")]
    found = [p for p in top if p.exists()] + [REPO / ".ci" / "run", REPO / ".pre-commit-config.yaml"]
    for tree in TREES:
        for path in sorted((REPO / tree).rglob("*")):
            parts = path.relative_to(REPO).parts
            if (
                path.suffix in TEXT
                and path.is_file()
                and "__pycache__" not in parts
                and parts[:2] != ("bench", "results")
            ):
                found.append(path)
    return found


def missing_paths(text: str, exists: Any, in_wheel: set[str]) -> list[str]:
    """The paths ``text`` names that ``exists`` denies (and, for ``file::name``, that define no ``name``)."""
    missing = []
    for match in PATH.finditer(text):
        path, name = match.group(1).rstrip("."), match.group(2)
        if any(path == w or path.startswith(w + "/") or w.startswith(path + "/") for w in in_wheel):
            continue
        target = exists(path)
        if target is None:
            missing.append(path)
        elif name and not re.search(rf"^\s*(?:async def|def|class) {name}\b", target, re.M):
            missing.append(f"{path}::{name}")
    return missing


def _read(path: str) -> str | None:
    """The text of ``path`` under the repository ('' for a directory), or None if it is not there."""
    full = REPO / path
    if full.is_dir():
        return ""
    return full.read_text(encoding="utf-8", errors="replace") if full.is_file() else None


def _wheel_only() -> set[str]:
    """Paths that exist inside the built wheel only (pyproject's force-include: ``agentd/_migrations``)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return set(project["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"].values())


def test_every_file_the_repository_names_is_in_it() -> None:
    wheel = _wheel_only()
    found = [
        f"{p.relative_to(REPO)}: {m}"
        for p in texts()
        for m in missing_paths(p.read_text(encoding="utf-8"), _read, wheel)
    ]
    assert found == [], "named but not in the repository:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        # (built with +: this file's own text is checked too)
        ("see `bench/" + "gone.py` and bench/daemon.py.", ["bench/" + "gone.py"]),
        ("tests/test_repository.py::" + "test_no_such_test", ["tests/test_repository.py::" + "test_no_such_test"]),
        ("tests/test_repository.py::missing_paths, docs/notes/", []),
        ("https://example.org/docs/none.md, ~/my-agentd/personas/x.toml, agentd/_migrations/env.py", []),
    ],
)
def test_the_path_check_sees_a_path_that_is_not_there(text: str, missing: list[str]) -> None:
    assert missing_paths(text, _read, _wheel_only()) == missing
