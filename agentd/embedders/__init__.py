"""Embedders: one small protocol, three providers (local ONNX, litellm, none).

An embedder is injected wherever text becomes a vector (the memory service, the
actors); nothing else knows which model is behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from agentd.relevance import DEFAULT_WORDS, UNCALIBRATED, Calibration, WordWeights

if TYPE_CHECKING:
    from collections.abc import Sequence


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    #: Identifies the model; stored with the vectors so two models never mix.
    model_id: str

    @property
    def dimension(self) -> int:
        """The size of every vector this model returns."""
        ...

    calibration: Calibration
    #: Hybrid search's word and date weights in this model's cosine units.
    words: WordWeights

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts to be stored (memories) as an array ``(len(texts), dimension)``, rows of unit length."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Search queries, as :meth:`embed` (asymmetric models embed a query differently)."""
        ...


def normalize(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise rows (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)


__all__ = ["DEFAULT_WORDS", "UNCALIBRATED", "Calibration", "Embedder", "WordWeights", "normalize"]
