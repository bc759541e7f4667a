"""Embedders: one small protocol, three providers (local ONNX, litellm, none).

An embedder is injected wherever text becomes a vector (the memory service, the
actors); nothing else knows which model is behind it. What any of them returns
is checked (:func:`check_vectors`) before it is used or stored, and every call
is bounded in time (:mod:`agentd.embedders.guard`).

numpy is imported where vectors are made or checked, not with these modules: a
command that builds the embedder but never embeds (``agentd memory list``) does
not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agentd._exceptions import EmbedderBadOutput
from agentd.embedders.calibration import DEFAULT_WORDS, UNCALIBRATED, Calibration, WordWeights

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np


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


#: How far from 1 a row's L2 norm may be (float32 rounding is ~1e-7).
NORM_TOLERANCE = 1e-3


def check_vectors(vectors: object, count: int, dimension: int, model_id: str) -> np.ndarray:
    """``vectors`` as a float32 ``(count, dimension)`` array of finite unit rows, or :class:`EmbedderBadOutput`."""
    import numpy as np

    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbedderBadOutput(f"{model_id} answered something that is not an array of numbers: {exc}") from exc
    if array.ndim != 2 or array.shape[0] != count:
        got = f"{array.shape[0]} vectors" if array.ndim == 2 else f"an array of shape {array.shape}"
        raise EmbedderBadOutput(f"{model_id} answered {got} for {count} texts")
    if count and array.shape[1] != dimension:
        raise EmbedderBadOutput(f"{model_id} answered {array.shape[1]}-d vectors; the store holds {dimension}-d ones")
    finite = np.isfinite(array).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise EmbedderBadOutput(f"{model_id} answered a vector with NaN or infinite values (text {row})")
    norms = np.linalg.norm(array, axis=1)
    off = np.abs(norms - 1.0) > NORM_TOLERANCE
    if off.any():
        row = int(np.flatnonzero(off)[0])
        raise EmbedderBadOutput(
            f"{model_id} answered a vector of length {float(norms[row]):.4g}, not a unit vector (text {row})"
        )
    return np.ascontiguousarray(array)


def normalize(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise rows (zero rows stay zero)."""
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)


__all__ = ["DEFAULT_WORDS", "UNCALIBRATED", "Calibration", "Embedder", "WordWeights", "check_vectors", "normalize"]
