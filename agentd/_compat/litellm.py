"""Files litellm ships, found without importing litellm (seconds of imports).

agentd counts tokens as litellm's ``token_counter`` does, with the BPE files litellm ships in
``litellm/litellm_core_utils/tokenizers/`` (tiktoken's cache layout: each file named by the
SHA-1 of the URL tiktoken would download it from), and reads what litellm knows of models
(context windows, prices) from the JSON file it ships at its root. Where they are is litellm's
internal layout.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

#: Where tiktoken would download an encoding's BPE file from (its cache names files by this URL's SHA-1).
BPE_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"

#: What :func:`bpe_file` relies on, checked by :func:`broken`.
ASSUMPTIONS = {
    "tokenizers": "litellm ships tiktoken's BPE files in litellm/litellm_core_utils/tokenizers/, "
    "each named by the SHA-1 of its download URL (cl100k_base among them)",
    "model_map": "litellm ships what it knows of models in litellm/model_prices_and_context_window_backup.json "
    "(a JSON object keyed by model name)",
}


def package_dir() -> Path | None:
    """litellm's package directory (None when it is not installed)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def model_map_file() -> Path | None:
    """The JSON file of what litellm knows of models (None when litellm is not installed)."""
    root = package_dir()
    return None if root is None else root / "model_prices_and_context_window_backup.json"


def tokenizers_dir() -> Path | None:
    """litellm's directory of BPE files (``CUSTOM_TIKTOKEN_CACHE_DIR`` when set: litellm honours it
    too), or None when litellm is not installed or ships none."""
    custom = os.environ.get("CUSTOM_TIKTOKEN_CACHE_DIR")
    if custom:
        return Path(custom)
    root = package_dir()
    path = None if root is None else root / "litellm_core_utils" / "tokenizers"
    return path if path is not None and path.is_dir() else None


def bpe_file_name(encoding: str) -> str:
    """The name of ``encoding``'s BPE file among litellm's (tiktoken's cache name: its URL's SHA-1)."""
    return hashlib.sha1(BPE_URL.format(encoding).encode()).hexdigest()


def bpe_file(encoding: str) -> Path | None:
    """Where ``encoding``'s BPE file would be among litellm's (it may be missing: see ``is_file``)."""
    folder = tokenizers_dir()
    return None if folder is None else folder / bpe_file_name(encoding)


def broken() -> list[str]:
    """The :data:`ASSUMPTIONS` the installed litellm breaks, each named (empty: all hold)."""
    import json

    failed: list[str] = []
    path = bpe_file("cl100k_base")
    if path is None or not path.is_file():
        failed.append(ASSUMPTIONS["tokenizers"])
    known = model_map_file()
    try:
        holds = known is not None and "gpt-4o-mini" in json.loads(known.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        holds = False
    if not holds:
        failed.append(ASSUMPTIONS["model_map"])
    return failed
