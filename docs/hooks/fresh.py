"""MkDocs hook: the build fails (under --strict) when a generated reference page is out of date.

The pages docs/gen_ref.py writes (CLI, configuration, HTTP API, errors) are committed so that
they can be read and linked like any page; this regenerates them at every build and warns,
naming each stale page and the command that refreshes it, when one differs from the code.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.agentd_fresh")
_GEN = Path(__file__).resolve().parent.parent / "gen_ref.py"


def on_pre_build(config: Any) -> None:
    """Compare each generated page with what the code generates now."""
    spec = importlib.util.spec_from_file_location("agentd_docs_gen_ref", _GEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for page in module.stale():
        log.warning("docs/%s is out of date with the code: run `python docs/gen_ref.py`", page)
