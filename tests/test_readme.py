"""The README and the docs site as a user reads them: every error code is listed, every file they
point at exists, the persona files the guides show load, the local-server example answers against
a fake OpenAI-compatible server on loopback, and the systemd unit's command line parses. (The site
itself, its generated references and its build: tests/test_docs.py.)"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from agentd._exceptions import CATALOGUE
from agentd.cli.main import cli
from agentd.personas import load_persona_file
from agentd.skills import SKILLS
from tests.conftest import REPO, agentd_cli, write_home
from tests.support.fakeopenai import FakeOpenAI, Turn

DOCS = REPO / "docs"
GUIDES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
#: The pages that show persona files: the full one first (configuration), then the real models.
PERSONA_PAGES = [DOCS / "guides" / "configuration.md", DOCS / "guides" / "real-models.md"]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_the_errors_page_lists_every_error_code_with_its_status() -> None:
    errors = _text(DOCS / "reference" / "errors.md")
    for code, info in CATALOGUE.items():
        assert re.search(rf"^\| `{re.escape(code.value)}` \| {info.status} \|", errors, re.M), code.value


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_every_file_a_guide_points_at_is_in_the_repository(guide: Path) -> None:
    text = guide.read_text(encoding="utf-8")
    links = [m for m in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in m]
    quoted = re.findall(r"`((?:agentd|bench|docs|examples|migrations|personas|tests)/[\w./-]+)`", text)
    missing = []
    for ref in [*links, *quoted]:
        ref = ref.split(":")[0].rstrip(".")
        if "*" in ref or "<" in ref:
            continue
        if not (guide.parent / ref).exists() and not (REPO / ref).exists():
            missing.append(ref)
    assert not missing, f"{guide.name} points at files that are not in the repository: {missing}"
    assert "../shared" not in text
    assert "/work/" not in text
    assert "DESIGN.md" not in text
    assert not re.search(r"\bseeds? 00\d", text, re.I)


def _persona_blocks() -> list[str]:
    text = "\n".join(_text(page) for page in [*PERSONA_PAGES, DOCS / "getting-started.md"])
    return [b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if re.search(r'^name = "', b, re.M)]


def test_the_persona_files_it_shows_load(tmp_path: Path) -> None:
    blocks = _persona_blocks()
    assert len(blocks) >= 4  # the full file, OpenAI, Anthropic, a local server
    for block in blocks:
        data = tomllib.loads(block)
        path = tmp_path / f"{data['name']}.toml"
        path.write_text(block.replace('# project_dir = "../myproject"', ""))
        persona = load_persona_file(path, tuple(SKILLS))
        assert persona.model
        assert persona.system_prompt


def test_the_full_persona_file_shows_every_key() -> None:
    from agentd.personas import _PersonaFile

    full = _persona_blocks()[0]
    for key in _PersonaFile.model_fields:
        assert re.search(rf"^(# )?{key} = ", full, re.M), key


@pytest.mark.slow
def test_the_real_model_examples_name_the_key_their_provider_needs(tmp_path: Path) -> None:
    """What `agentd doctor` says for the OpenAI and Anthropic examples, without a key set."""
    section = _text(DOCS / "guides" / "real-models.md")
    blocks = [b for b in re.findall(r"```toml\n(.*?)```", section, re.S) if "api_base" not in b]
    personas = {tomllib.loads(b)["model"].split("/")[0]: b for b in blocks}
    config = write_home(
        tmp_path,
        personas={
            "openai": personas["openai"].replace('"buddy"', '"openai"'),
            "anthropic": personas["anthropic"].replace('"buddy"', '"anthropic"'),
        },
    )
    result = agentd_cli("doctor", "--json", config=config, env={"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": ""})
    report = {c["check"]: c for c in json.loads(result.stdout)}
    assert "OPENAI_API_KEY" in report["llm openai"]["detail"]
    assert not report["llm openai"]["ok"]
    assert "ANTHROPIC_API_KEY" in report["llm anthropic"]["detail"]
    assert not report["llm anthropic"]["ok"]


@pytest.mark.slow
def test_the_local_server_example_answers_with_no_key_variable(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """The real-models guide's local-server persona, pointed at a fake OpenAI-compatible server on loopback."""
    block = next(b for b in _persona_blocks() if "api_base" in b and not b.lstrip().startswith("#"))
    local = re.sub(r'^api_base = "[^"]*"', f'api_base = "{fake_openai.url}"', block, flags=re.M)
    assert local != block
    config = write_home(tmp_path, personas={"local": local})
    env = {"OPENAI_API_KEY": ""}
    ping = agentd_cli("doctor", "--ping", "--json", config=config, env=env)
    report = {c["check"]: c for c in json.loads(ping.stdout)}
    assert report["ping local"]["ok"], report["ping local"]
    fake_openai.queue(Turn(text="Hello from a local model."))
    chat = agentd_cli("chat", "local", "--message", "hello", config=config, env=env)
    assert chat.returncode == 0, chat.stderr
    assert "Hello from a local model." in chat.stdout
    assert all(auth == "Bearer agentd-no-key" for auth in fake_openai.authorizations)


def test_the_systemd_unit_runs_a_command_agentd_has() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(REPO / "examples" / "agentd.service")
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[0].endswith("/agentd")
    ctx = cli.make_context("agentd", argv[1:], resilient_parsing=True)
    assert ctx.protected_args + ctx.args == ["serve"] or ctx.args[:1] == ["serve"]
    assert "AGENTD_HOME=" in unit["Service"]["Environment"]


# -- transcripts: what the pages show a command printing is what it prints -------------------------------

#: Pages whose transcript blocks (a fence whose first line is ``$ agentd ...``, commands with what they
#: print) are run on a fresh install and compared; AGENTD_UPDATE_DOCS=1 writes what was printed instead.
TRANSCRIPT_PAGES = [REPO / "README.md", DOCS / "getting-started.md"]
#: The login name the transcripts are shown for.
TRANSCRIPT_USER = "alice"


def transcript_blocks(text: str) -> list[str]:
    """The bodies of the page's transcript blocks (fences read in order: an opening, then its closing)."""
    blocks: list[str] = []
    body: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            if body is None:
                body = [] if line.strip() in ("```", "```console") else ["\0"]  # \0: another language
            else:
                if body and body[0] != "\0" and body[0].startswith("$ agentd "):
                    blocks.append("".join(body))
                body = None
        elif body is not None:
            body.append(line)
    return blocks


def run_transcript(block: str, where: Path) -> str:
    """Run the block's commands in order in a fresh clone at ``where`` (as :data:`TRANSCRIPT_USER`, an empty
    data directory), and give the block as it should read: each command, then what it printed."""
    import os
    import shutil
    import subprocess
    import sys

    work = where / "clone"
    work.mkdir(parents=True)
    shutil.copy(REPO / "agentd.toml", work / "agentd.toml")
    shutil.copytree(REPO / "personas", work / "personas")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(AGENTD_HOME=str(where / "data"), HOME=str(where), LOGNAME=TRANSCRIPT_USER, USER=TRANSCRIPT_USER)
    agentd = str(Path(sys.executable).parent / "agentd")
    parts = []
    for line in block.splitlines():
        if not line.startswith("$ agentd "):
            continue
        argv = shlex.split(line.removeprefix("$ agentd "))
        ran = subprocess.run(
            [agentd, *argv], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120
        )
        assert ran.returncode == 0, f"{line}:\n{ran.stdout}"
        parts.append(f"{line}\n{ran.stdout}")
    return "\n".join(parts)


@pytest.mark.parametrize("page", TRANSCRIPT_PAGES, ids=lambda p: p.name)
@pytest.mark.slow
def test_the_transcripts_a_page_shows_are_what_a_fresh_install_prints(page: Path, tmp_path: Path) -> None:
    """The README's first session and the getting-started page's: every command run in a fresh clone as
    alice, its output exactly what the page shows (relevance figures included)."""
    import os

    text = _text(page)
    blocks = transcript_blocks(text)
    assert blocks, f"{page.name} shows no transcript"
    for i, block in enumerate(blocks):
        printed = run_transcript(block, tmp_path / f"block{i}")
        if os.environ.get("AGENTD_UPDATE_DOCS"):
            text = text.replace(block, printed, 1)
            continue
        assert printed == block, f"{page.name}: the transcript differs from what agentd prints (AGENTD_UPDATE_DOCS=1 "
        "rewrites it):\n" + printed
    if os.environ.get("AGENTD_UPDATE_DOCS"):
        page.write_text(text, encoding="utf-8")
