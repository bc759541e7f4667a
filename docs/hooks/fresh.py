"""MkDocs hooks: the build fails (under --strict) when a generated reference page is out of date,
and the Python client's docstrings lose the reST markup mkdocstrings does not read.

The pages docs/gen_ref.py writes (CLI, configuration, HTTP API, errors) are committed so that
they can be read and linked like any page; this regenerates them at every build and warns,
naming each stale page and the command that refreshes it, when one differs from the code.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.agentd_fresh")
_GEN = Path(__file__).resolve().parent.parent / "gen_ref.py"


def on_pre_build(config: Any) -> None:
    """Compare each generated page with what the code generates now."""
    spec = importlib.util.spec_from_file_location("agentd_docs_gen_ref", _GEN)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for page in module.stale():
        log.warning("docs/%s is out of date with the code: run `python docs/gen_ref.py`", page)


#: reST markup agentd's docstrings use (for pydoc and IDEs) that mkdocstrings leaves as text.
_ROLE = re.compile(r":(?:meth|class|func|attr|data|mod|exc|obj):(?=<code>)")
_LITERAL = re.compile(r"<p>::</p>\s*")


def on_page_content(html: str, page: Any, **_: Any) -> str:
    """The Python client's reference: ``:class:`X``` shows as ``X``, a lone ``::`` not at all."""
    if page.file.src_uri.startswith("reference/"):
        html = _LITERAL.sub("", _ROLE.sub("", html))
    return html
