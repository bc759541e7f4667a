"""The documentation site: its generated references match the code, cover every command, key,
endpoint and error code, the site builds with ``mkdocs build --strict`` (no broken link, no page
outside the nav) with the references in it, the README stays a front page, and the tuning
notebooks stay in docs/notes/."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest

from agentd._exceptions import CATALOGUE
from tests.conftest import REPO

DOCS = REPO / "docs"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agentd_docs_gen_ref", DOCS / "gen_ref.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    """Every generated page, made now from the code (the HTTP API from a real `agentd serve`)."""
    pages: dict[str, str] = _load_generator().generate()
    return pages


def test_the_committed_references_are_what_the_code_generates(generated: dict[str, str]) -> None:
    """Change a command, a config key, an endpoint or an error code, and this fails until
    `python docs/gen_ref.py` is run."""
    for page, text in generated.items():
        committed = (DOCS / page).read_text(encoding="utf-8")
        assert committed == text, f"docs/{page} is out of date: run `python docs/gen_ref.py`"


def _commands(cmd: click.Command, ctx: click.Context, path: str) -> list[str]:
    found = [path]
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None
            found += _commands(sub, click.Context(sub, info_name=name, parent=ctx), f"{path} {name}")
    return found


def test_the_cli_reference_has_every_command_and_option(generated: dict[str, str]) -> None:
    from agentd.cli.main import cli

    page = generated["reference/cli.md"]
    ctx = click.Context(cli, info_name="agentd")
    paths = _commands(cli, ctx, "agentd")[1:]
    assert len(paths) > 12
    for path in paths:
        assert re.search(rf"^#+ `{re.escape(path)}`$", page, re.M), path
    chat = page[page.index("## `agentd chat`") :]
    for option in ("--channel", "--user", "--message", "--no-memory", "--json"):
        assert f"`{option}`" in chat.split("\n## ")[0], option


def _keys(model: Any, prefix: str) -> list[str]:
    from agentd.config import _Section

    out = []
    for name, field in model.model_fields.items():
        inner = [a for a in (field.annotation, *getattr(field.annotation, "__args__", ())) if isinstance(a, type)]
        section = next((a for a in inner if issubclass(a, _Section)), None)
        if section is not None:
            out += _keys(section, f"{prefix}.{name}.NAME" if "dict" in str(field.annotation) else f"{prefix}.{name}")
        else:
            out.append(f"{prefix}.{name}")
    return out


def test_the_configuration_reference_has_every_key_with_its_default(generated: dict[str, str]) -> None:
    from agentd.config import _Root

    page = generated["reference/configuration.md"]
    keys = _keys(_Root, "")
    assert len(keys) > 80
    for dotted in keys:
        section, key = dotted[1:].rsplit(".", 1)
        table = page[page.index(f"## `[{section}]`") :].split("\n## ")[0]
        assert re.search(rf"^\| `{key}` \| (?:[^|]|\\\|)+ \| (?:`[^`]*`|unset) \| \S", table, re.M), dotted
    assert re.search(r"^\| `max_per_reply` \| integer \(≥ 1, ≤ 100\) \| `3` \| ", page, re.M)
    assert re.search(r"^\| `min_score` \| number \(≥ 0.0, ≤ 1.0\) \| `0.5` \| ", page, re.M)
    from agentd.personas import _PersonaFile

    personas = page[page.index("## Persona files") :]
    for key in _PersonaFile.model_fields:
        assert re.search(rf"^\| `{key}` \| ", personas, re.M), key


def test_the_http_reference_has_every_route_and_the_errors_page_every_code(generated: dict[str, str]) -> None:
    from fastapi.routing import APIRoute

    from agentd.api import admin, channels, chat, memory_routes, openai_compat

    page = generated["reference/http-api.md"]
    for module in (chat, channels, memory_routes, admin, openai_compat):
        for route in module.router.routes:
            if isinstance(route, APIRoute) and route.include_in_schema:
                for method in route.methods:
                    path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)  # {memory_id:agentd_id}: a converter
                    assert f"### `{method} {path}`" in page, (method, path)
    assert "Roles: `admin`, `adapter`." in page
    assert "### ChatRequest" in page
    errors = generated["reference/errors.md"]
    for code, info in CATALOGUE.items():
        assert re.search(rf"^\| `{re.escape(code.value)}` \| {info.status} \|", errors, re.M), code.value


@pytest.mark.slow
def test_the_site_builds_strictly_with_the_references_in_it(tmp_path: Path) -> None:
    """What .ci/run builds: no broken link or anchor, no page left out of the nav."""
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    assert "WARNING" not in build.stderr, build.stderr[-3000:]

    def html(page: str) -> str:
        return (site / page / "index.html").read_text(encoding="utf-8")

    assert "min_score" in html("reference/configuration")
    assert "half_life_days" in html("reference/configuration")
    assert "/v1/memory/context" in html("reference/http-api")
    assert "x-agentd-roles" not in html("reference/http-api")
    assert "agentd budget" in html("reference/cli")
    assert "embedder_timeout" in html("reference/errors")
    assert "AsyncAgentdClient" in html("reference/python-client")
    assert "add_memory" in html("reference/python-client")
    for picture in ("images/message-path.svg", "images/budget.svg", "screenshots/web-annotated.png"):
        assert (site / picture).stat().st_size > 1000, picture
    assert "message-path.svg" in html("concepts")
    assert "budget.svg" in html("concepts")


def test_the_readme_is_a_front_page() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "\n## Quick start\n" in readme
    assert "mem0" in readme
    assert "Letta" in readme
    assert "Zep" in readme
    for page in ("docs/getting-started.md", "docs/concepts.md", "docs/reference/configuration.md"):
        assert f"]({page})" in readme, page


#: A tuning pass, as the notebooks head them ("## Eleventh pass: ...").
PASS = re.compile(r"^#+ .*\b(\w+th|first|second|third|\d+(st|nd|rd|th)) pass\b", re.I | re.M)


def test_tuning_notebooks_live_in_docs_notes_each_headed_by_a_summary() -> None:
    outside = [REPO / "README.md", *(p for p in DOCS.rglob("*.md") if "notes" not in p.relative_to(DOCS).parts)]
    for page in outside:
        assert not PASS.search(page.read_text(encoding="utf-8")), page
    notebooks = [p for p in (DOCS / "notes").glob("*.md") if p.name != "index.md"]
    assert len(notebooks) >= 6
    index = (DOCS / "notes" / "index.md").read_text(encoding="utf-8")
    for notebook in notebooks:
        head = notebook.read_text(encoding="utf-8")[:2500]
        assert re.search(r"^!!! summary ", head, re.M), f"{notebook.name}: head it with a current summary"
        assert f"]({notebook.name})" in index, notebook.name
