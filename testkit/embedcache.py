"""A passage-embedding cache for benchmarks: the same text, the same model, the same vector, once.

Benchmarks that ingest tens of thousands of memories (bench/longmemeval.py) spend
nearly all their time embedding them, and the machine's CPU is shared. Wrapped
around a local embedder, :class:`CachedEmbedder` keeps each stored text's
vector in a file named for the model (``DIR/<model_id>.npz``), keyed by the
sha256 of the text, and embeds only what the file does not have. Queries are
never cached: their embedding is part of what a search costs, and is timed.

The local models embed one text at a time (e5-small-v2: ``max_batch = 1``), so
a text's vector does not depend on what it was embedded with: a cached vector is
exactly the one the model would give again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentd.embedders.local import LocalEmbedder


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def _stored(key: np.ndarray) -> bytes:
    """A key as read back: 32 raw bytes (older files hold "S32" strings, their trailing NULs cut)."""
    raw = key.tobytes() if key.dtype == np.uint8 else bytes(key)
    return raw.ljust(32, b"\0")


class CachedEmbedder:
    """An :class:`agentd.embedders.Embedder` that reads stored texts' vectors from a file when it can."""

    def __init__(self, inner: LocalEmbedder, directory: Path | None) -> None:
        self._inner = inner
        self.model_id = inner.model_id
        self.calibration = inner.calibration
        self.words = inner.words
        self.dimension = inner.dimension
        self.hits = 0
        self.misses = 0
        self._path = None if directory is None else directory / f"{inner.model_id}.npz"
        self._vectors: dict[bytes, np.ndarray] = {}
        self._dirty = False
        if self._path is not None and self._path.is_file():
            with np.load(self._path) as data:
                for key, vec in zip(data["keys"], data["vectors"], strict=True):
                    self._vectors[_stored(key)] = vec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Stored texts' vectors: cached ones read, the others embedded (and kept)."""
        keys = [_key(t) for t in texts]
        todo = [i for i, k in enumerate(keys) if k not in self._vectors]
        if todo:
            fresh = self._inner.embed([texts[i] for i in todo])
            for i, vec in zip(todo, fresh, strict=True):
                self._vectors[keys[i]] = vec
            self._dirty = True
        self.misses += len(todo)
        self.hits += len(texts) - len(todo)
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = self._vectors[k]
        return out

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries, always embedded by the model."""
        return self._inner.embed_queries(texts)

    def save(self) -> None:
        """Write the cache file (atomically, merged with what it holds now) when something was added."""
        if self._path is None or not self._dirty:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        if self._path.is_file():  # another run may have added to it meanwhile: keep its vectors too
            with np.load(self._path) as data:
                for key, vec in zip(data["keys"], data["vectors"], strict=True):
                    self._vectors.setdefault(_stored(key), vec)
        # Raw bytes, not numpy's "S32" strings: those drop a digest's trailing NUL bytes.
        keys = np.frombuffer(b"".join(self._vectors), dtype=np.uint8).reshape(-1, 32)
        vectors = np.stack(list(self._vectors.values())).astype(np.float32)
        tmp = self._path.with_name(f".{self._path.name}.{os.getpid()}.tmp.npz")
        np.savez(tmp, keys=keys, vectors=vectors)
        os.replace(tmp, self._path)
        self._dirty = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
