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

    from agentd.config import EmbeddingConfig


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    #: Identifies the model; stored with the vectors so two models never mix.
    model_id: str
    dimension: int
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


def build_embedder(config: EmbeddingConfig) -> Embedder | None:
    """The configured embedder, or ``None`` for ``provider = "none"``."""
    if config.provider == "none":
        return None
    if config.provider == "local":
        from agentd.embedders.local import LocalEmbedder

        embedder: Embedder = LocalEmbedder(config.model, batch_size=config.batch_size)
    else:
        from agentd.llm.embedding import LitellmEmbedder

        embedder = LitellmEmbedder(
            model=config.model,
            api_base=config.api_base or None,
            api_key_env=config.api_key_env or None,
        )
    if config.calibration is not None:
        embedder.calibration = Calibration(config.calibration.midpoint, config.calibration.scale)
    return embedder


__all__ = ["DEFAULT_WORDS", "UNCALIBRATED", "Calibration", "Embedder", "WordWeights", "build_embedder", "normalize"]
